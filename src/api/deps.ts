import { parseBootstrapKeys, type Config } from '../lib/config/index.ts';
import { RuntimeAdmin } from '../lib/tenancy/admin.ts';
import { ApiKeyStore } from '../lib/tenancy/api-keys.ts';
import { ScopeLimitStore } from '../lib/tenancy/limits.ts';
import { ReadBudget } from '../lib/tenancy/read-budget.ts';
import { submitLimit } from '../lib/tenancy/rate-limit.ts';
import { StreamTokenStore } from '../lib/tenancy/stream-tokens.ts';
import { UsageReader } from '../lib/tenancy/usage.ts';
import { EventHub } from '../lib/streams/hub.ts';
import { RunStreams } from '../lib/streams/run-streams.ts';
import { OpenStreams } from '../lib/streams/open-streams.ts';
import { redisCheck, type ReadinessCheck } from '../lib/ops/health.ts';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import type { Resources } from '../lib/process/resources.ts';
import { RunStore } from '../lib/engine/store.ts';
import type { SchemaGuard } from '../lib/engine/schema/schema-guard.ts';
import { Submissions } from '../lib/engine/submissions.ts';
import type { ArtifactStore } from '../lib/artifacts/artifact-store.ts';
import { WaitStore } from '../lib/engine/waits/wait-store.ts';
import type { WaitTokens } from '../lib/engine/waits/wait-tokens.ts';
import type { RateLimiter } from '../lib/engine/flow/rate-limiter.ts';
import { ScheduleStore } from '../lib/schedules/schedule-store.ts';
import { BulkOperations } from '../lib/engine/operations/bulk-operations.ts';
import { SessionForks } from '../lib/engine/operations/session-fork.ts';
import { ChatTurns } from '../lib/engine/operations/chat-turns.ts';
import { AgentCalls } from '../lib/mcp/agent-calls.ts';

/**
 * What the HTTP layer needs from the process that hosts it: the domain objects routes call
 * (one call each), and what the middleware and the ops routes read. No connection: a route
 * reaches Redis only through a domain call.
 */
export interface AppDeps {
  config: Config;
  store: RunStore;
  /** Submits, with every check a submit makes (the submit route's one call). */
  submissions: Submissions;
  apiKeys: ApiKeyStore;
  /** Read-only tokens for browser pages, accepted by the routes of access `stream`. */
  streamTokens: StreamTokenStore;
  streams: RunStreams;
  /** The event streams open in this process: their caps, and their end when a key is revoked. */
  openStreams: OpenStreams;
  log: Logger;
  /** The process's Prometheus registry (shared with a worker in the same process). */
  metrics: Metrics;
  /** What /readyz requires: Redis, plus the readiness of a worker hosted in this process. */
  checks: readonly ReadinessCheck[];
  admin: RuntimeAdmin;
  /** A scope's operator-set limits (and the cached maxStreams each stream admission reads). */
  limits: ScopeLimitStore;
  /** Each scope's budget of costly reads (history pages, listings): the routes of `readCost` go through it. */
  reads: ReadBudget;
  /** Model providers' rate-limit buckets (RATE_LIMITS): what operators read, pause and resume. */
  rateLimits: RateLimiter;
  /** Model usage of a scope and of a run. */
  usage: UsageReader;
  /** Compiles outputSchemas off the event loop; unset: the process's shared guard. */
  schemaGuard: SchemaGuard;
  /** Where input artifacts are stored. */
  artifacts: ArtifactStore;
  /** Resumes waits (by key, or by resume token). */
  waits: WaitStore;
  /** Shows pending waits' resume tokens to keys of their scope. */
  waitTokens: WaitTokens;
  /** The scopes' cron schedules (their ticks are fired by every process's Scheduler). */
  schedules: ScheduleStore;
  /** The scopes' bulk cancels and re-runs (advanced by every process's BulkWorker). */
  operations: BulkOperations;
  /** Session forks (a copy of a session's committed history, in chunks). */
  forks: SessionForks;
  chats: ChatTurns;
  /** Baton's agents as MCP tools: the tools of the runtime's live workers, and calls of them as runs. */
  agentCalls: AgentCalls;
}

/**
 * The API's parts, built once on a process's composition root (openResources): `baton api`,
 * `baton start` and createBatonRouter all wire the HTTP layer here. `checks`: the readiness
 * of other components of the process (a co-hosted worker), added to /readyz.
 */
export async function apiDeps(res: Resources, checks: readonly ReadinessCheck[] = []): Promise<AppDeps> {
  const { config: c, redis, keys, metrics, gateways, registry } = res;
  const transitions = gateways.api;
  const log = res.log.child({ component: 'api' });
  const store = new RunStore(redis, keys, c, transitions, { cancelled: (run) => metrics.runFinished(run, 'cancelled') });
  const waits = new WaitStore(redis, keys, transitions, (scope, runId) => store.get(scope, runId), res.schemaGuard, {
    resumed: (wait) => metrics.waitEnded(wait.runtime, wait, 'resumed'),
  });
  const apiKeys = new ApiKeyStore(redis, keys);
  for (const k of parseBootstrapKeys(c.BATON_BOOTSTRAP_KEYS ?? '')) await apiKeys.ensure(k.scope, k.role, k.key);
  // Runtimes become label values of the API's metrics once their workers are seen live.
  registry.onLive((runtime, agents) => {
    metrics.registerRuntime(runtime, agents);
    res.watchRuntime(runtime);
  });
  const streamTokens = new StreamTokenStore(redis, keys, apiKeys, c.STREAM_TOKEN_TTL_MS, c.STREAM_TOKEN_MINT_PER_MIN);
  const openStreams = new OpenStreams({
    perKey: c.SSE_MAX_PER_KEY, perToken: c.SSE_MAX_PER_TOKEN, perProcess: c.SSE_MAX_PER_PROCESS, retryAfterMs: c.SSE_STALL_MS,
    // Every keep-alive period, one pipeline for all keys with open streams.
    recheckMs: c.SSE_KEEPALIVE_MS,
    stillValid: (ids) => apiKeys.existing(ids),
    onRecheckError: (err) => log.warn({ err: err.message }, 'could not check the keys of open streams'),
  });
  const streams = new RunStreams(redis, keys, new EventHub(res.subscriber, log, (kind) => metrics.liveNotification(kind)));
  const limits = new ScopeLimitStore(redis, keys, c, {
    fill: (scope) => gateways.sweeper.fill(scope), openStreams: (scope) => openStreams.ofScope(scope),
  });
  metrics.watchStreamBuffers(() => streams.buffers());
  // The door every run comes in by (the process's scheduler and bulk worker have one built the
  // same way, in openResources), with what only the API does: stream tokens, and its metrics.
  const submissions = new Submissions({
    redis, keys, config: c, transitions, store, artifacts: res.artifacts, registry, schemaGuard: res.schemaGuard,
    limit: submitLimit(c), streamTokens,
    events: {
      submitted(run) {
        metrics.runSubmitted(run);
        // The API exports the queue depth and waiting runs of every registered runtime it has submitted to
        // (bounded by METRICS_LABEL_LIMIT).
        res.watchRuntime(run.runtime);
      },
      deadline: (scope, member, at) => res.sweeper.soon(scope, member, at),
      steered: (runtime, outcome) => metrics.steeringOutcome(runtime, outcome),
    },
  });
  return {
    config: c, store, log, metrics, apiKeys, schemaGuard: res.schemaGuard, artifacts: res.artifacts, streamTokens,
    submissions,
    agentCalls: new AgentCalls({ registry, submissions, store, streams, runtime: c.RUNTIME }),
    waits, waitTokens: res.waitTokens,
    schedules: new ScheduleStore(redis, keys, c, gateways.schedules),
    operations: new BulkOperations(redis, keys, c, gateways.bulk),
    forks: new SessionForks(redis, keys, transitions),
    streams,
    chats: new ChatTurns(store, waits, streams),
    openStreams,
    admin: new RuntimeAdmin(redis, keys, transitions, registry),
    limits,
    usage: new UsageReader(redis, keys, c),
    reads: new ReadBudget(transitions, c, async (scope) => (await limits.limits(scope)).readBytesPerSec),
    rateLimits: res.rateLimits,
    checks: [redisCheck(redis), ...checks],
  };
}
