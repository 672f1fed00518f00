import type { ArtifactStore } from '../artifacts/artifact-store.ts';
import { RedisArtifactStore } from '../artifacts/redis-store.ts';
import type { Config } from '../config/index.ts';
import { Dispatcher } from '../engine/dispatcher.ts';
import { FairShare, heldBack } from '../engine/flow/fair-share.ts';
import { RateLimiter, scopeWeights } from '../engine/flow/rate-limiter.ts';
import { RunStore } from '../engine/store.ts';
import { SchemaGuard } from '../engine/schema/schema-guard.ts';
import { Submissions } from '../engine/submissions.ts';
import { Sweeper } from '../engine/sweeper.ts';
import { gateways, type Gateways } from '../transitions/gateways.ts';
import { WaitTokens } from '../engine/waits/wait-tokens.ts';
import { createKeys, type Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import type { Registry } from 'prom-client';
import { Metrics } from '../ops/metrics.ts';
import { QUEUE_STATES } from '../ops/metrics-scrape.ts';
import { waitingRuns } from '../ops/waiting-runs.ts';
import { createRedis, waitReady, type Redis } from '../redis/redis.ts';
import { parseRedisUrl } from '../config/redis-url.ts';
import { WorkerRegistry } from '../engine/flow/worker-registry.ts';
import { submitLimit } from '../tenancy/rate-limit.ts';
import { Scheduler } from '../schedules/scheduler.ts';
import { BulkWorker } from '../engine/operations/bulk-operations.ts';

/**
 * The composition root of one Baton process: its Redis connections, key builder, metrics
 * registry, dispatcher, transitions' gateways, sweeper, worker registry and queue watchers,
 * made once and closed once. `baton start` hosts the API and a worker on one of these;
 * `baton api` and `baton worker` each open their own. The API's parts (apiDeps, api/deps.ts)
 * and a worker's own (its leases, executor and presence, startWorker) are built from it and
 * from nothing else: domain code receives what it needs from here, never from the environment.
 */
export interface Resources {
  readonly config: Config;
  readonly log: Logger;
  readonly keys: Keys;
  readonly metrics: Metrics;
  /** Request-path commands and every transition; fails fast while Redis is down. */
  readonly redis: Redis;
  /** BullMQ's connection (queues and workers); retries forever, as BullMQ requires. */
  readonly bull: Redis;
  /** Pub/sub: live stream notifications (API) and cancel requests (worker) share it. */
  readonly subscriber: Redis;
  readonly dispatcher: Dispatcher;
  /** The transitions' gateways, one per caller (the API's, the worker's, the sweeper's, flow control's, schedules', bulk operations'). */
  readonly gateways: Gateways;
  readonly sweeper: Sweeper;
  /** Fires cron schedules' ticks (every process runs one; src/lib/schedules/scheduler.ts). */
  readonly scheduler: Scheduler;
  /** Advances bulk operations (every process runs one; src/lib/engine/operations/bulk-operations.ts). */
  readonly bulk: BulkWorker;
  /** The scopes' fair shares of the workers' slots: worked out by one process at a time, read by all. */
  readonly fairShare: FairShare;
  /** Where input artifacts are kept (the Redis store unless the process was given another). */
  readonly artifacts: ArtifactStore;
  /** Compiles and checks output schemas in a thread of its own, within a time budget. */
  readonly schemaGuard: SchemaGuard;
  /** Derives the resume tokens of waits (workers record their digests, the API shows and checks them). */
  readonly waitTokens: WaitTokens;
  /** The process's one reader of the worker registry (the API's listings and warnings, a worker's readiness). */
  readonly registry: WorkerRegistry;
  /** Model providers' rate-limit buckets (RATE_LIMITS): a worker's model calls take grants, an operator pauses and resumes them. */
  readonly rateLimits: RateLimiter;
  /**
   * Exports `runtime`'s queue depth and waiting runs at every scrape (once per runtime; a
   * runtime past METRICS_LABEL_LIMIT is not read): a worker's own runtime, and on the API the
   * runtimes it submitted to or saw live.
   */
  watchRuntime(runtime: string): void;
  /** Stops the sweeper, closes the queues, the connections and the schema thread. Idempotent. */
  close(): Promise<void>;
}

export interface ResourceOptions {
  config: Config;
  redisUrl: string;
  log: Logger;
  /** A registry to share (an application's own); else one is made for this process. */
  metrics?: Metrics;
  /**
   * A host app's prom-client registry (without `metrics`): Baton's metrics are registered in
   * it, with no process metrics (those are the host's). One Baton per registry: a name
   * already there is refused before anything is registered or connected.
   */
  hostRegistry?: Registry;
  /** An S3-like store for input artifacts; default: Redis, under each scope. */
  artifacts?: ArtifactStore;
  /** What the process is (`api`, `worker`, `start`): its connections are named `<role>-cmd`, `-bull`, `-sub`. */
  role: string;
}

export async function openResources(o: ResourceOptions): Promise<Resources> {
  const { config: c, redisUrl: url, log } = o;
  if (c.REDIS_MIN_REPLICAS_ACK > 0 && redisTargetKind(url) === 'cluster') {
    // WAIT counts the replicas of the node a connection writes to; a Cluster client spreads writes over many.
    throw new Error('REDIS_MIN_REPLICAS_ACK is not supported with redis+cluster:// URLs: set it to 0, or use one primary (with Sentinel)');
  }
  const metrics = o.metrics ?? processMetrics(c, o.hostRegistry);
  const keys = createKeys(c.BATON_KEY_PREFIX);
  const events = metrics.redisEvents;
  const redis = createRedis({ url, name: `${o.role}-cmd`, logger: log, events });
  const bull = createRedis({ url, name: `${o.role}-bull`, logger: log, blocking: true, events });
  const subscriber = createRedis({ url, name: `${o.role}-sub`, logger: log, blocking: true, subscriber: true, events });
  const quit = () => Promise.all([redis, bull, subscriber].map((r) => r.quit().catch(() => {})));
  try {
    await waitReady(redis);
  } catch (err) {
    await quit();
    throw err;
  }
  if (c.REDIS_MIN_REPLICAS_ACK > 0) await warnFewReplicas(redis, c.REDIS_MIN_REPLICAS_ACK, log);
  const waitTokens = new WaitTokens(redis, keys, c.WAIT_TOKEN_SECRET);
  try {
    await waitTokens.load();
  } catch (err) {
    await quit();
    throw err;
  }
  const dispatcher = new Dispatcher(bull, keys, (err, queue) => log.warn({ err: err.message, queue }, 'bullmq queue error'));
  // The fair share needs the registry, made below; the transitions read its level at each call.
  let fairShare: FairShare | undefined;
  const g = gateways(redis, keys, c, dispatcher, () => fairShare?.level() ?? {});
  // Every process sweeps: sweeps are idempotent, so more processes only repair sooner.
  const sweeper = new Sweeper(redis, keys, c, dispatcher, g.sweeper, log, {
    waitsExpired: (runtime, waits) => metrics.waitsExpired(runtime, waits),
    finished: (run, status) => metrics.runFinished(run, status),
  });
  sweeper.start();
  const schemaGuard = new SchemaGuard({ maxQueuedPerScope: c.SCHEMA_CHECKS_PER_SCOPE, events: metrics.schemaGuardEvents });
  const artifacts = o.artifacts ?? new RedisArtifactStore(redis, keys, g.api, c);
  const registry = new WorkerRegistry(redis, keys, c.LEASE_MS);
  // Schedules' ticks and bulk re-runs come in by the door every run takes (submissions.ts): its
  // checks, tracing, the scope's rate limit, its session queues, its slots.
  const store = new RunStore(redis, keys, c, g.api, { cancelled: (run) => metrics.runFinished(run, 'cancelled') });
  const submissions = new Submissions({
    redis, keys, config: c, transitions: g.api, store, artifacts, registry, schemaGuard, limit: submitLimit(c),
    events: {
      submitted: (run) => metrics.runSubmitted(run),
      steered: (runtime, outcome) => metrics.steeringOutcome(runtime, outcome),
      deadline: (scope, member, at) => sweeper.soon(scope, member, at),
    },
  });
  const scheduler = new Scheduler(redis, keys, c, g.schedules, submissions, log.child({ component: 'scheduler' }));
  scheduler.start();
  // Bulk cancels take the transition a single cancel takes.
  const bulk = new BulkWorker(redis, keys, c, g.bulk, store, submissions, log.child({ component: 'bulk' }));
  bulk.start();
  const rateLimits = new RateLimiter(g.flow, c.RATE_LIMITS, metrics.rateLimitEvents, {
    burst: c.RATE_LIMIT_BURST, pauseMaxMs: c.RATE_LIMIT_PAUSE_MAX_MS, weightOf: scopeWeights(redis, keys, c.SCOPE_WEIGHT),
  });
  metrics.watchRateLimits(c.RATE_LIMITS, () => rateLimits.list());
  fairShare = new FairShare(redis, keys, c, registry, g.sweeper, log);
  fairShare.start();
  metrics.watchFlowControl((perScope) => heldBack(redis, keys, c, perScope));
  const countJobs = (runtime: string) => dispatcher.jobCounts(runtime, QUEUE_STATES);
  const countWaiting = (runtime: string) => waitingRuns(redis, keys, runtime);
  const watchRuntime = (runtime: string) => {
    metrics.watchQueue(runtime, countJobs);
    metrics.watchWaiting(runtime, countWaiting);
  };
  let closing: Promise<void> | undefined;
  return {
    config: c, log, keys, metrics, redis, bull, subscriber, dispatcher, gateways: g, sweeper, scheduler, bulk, fairShare, schemaGuard,
    artifacts, waitTokens, registry, rateLimits, watchRuntime,
    close() {
      closing ??= (async () => {
        await sweeper.stop();
        await scheduler.stop();
        await bulk.stop();
        await fairShare?.stop();
        await dispatcher.close();
        await quit();
        await schemaGuard.close();
      })();
      return closing;
    },
  };
}

/**
 * The process's metrics registry, or Baton's metrics in a host app's registry. Checked before
 * anything is registered: a name clash (two Batons on one registry) fails here and leaves the
 * host's registry as it was.
 */
function processMetrics(c: Config, host: Registry | undefined): Metrics {
  const metrics = new Metrics({ scopeLabel: c.METRICS_SCOPE_LABEL, labelLimit: c.METRICS_LABEL_LIMIT, defaultMetrics: !host });
  if (!host) return metrics;
  const names = metrics.registry.getMetricsAsArray().map((m) => m.name);
  const taken = names.filter((name) => host.getSingleMetric(name));
  if (taken.length) throw new Error(`the registry already has Baton's metrics (${taken.join(', ')}): one router per registry`);
  for (const name of names) host.registerMetric(metrics.registry.getSingleMetric(name)!);
  return metrics;
}

/**
 * Says at start when the primary has fewer replicas than REDIS_MIN_REPLICAS_ACK asks for:
 * every submit would then be answered 503 after REDIS_REPLICA_ACK_TIMEOUT_MS. Not refused,
 * as a replica may be restarting; the log line says why the 503s come.
 */
async function warnFewReplicas(redis: Redis, wanted: number, log: Logger): Promise<void> {
  const info = await redis.info('replication');
  const connected = Number(/^connected_slaves:(\d+)/m.exec(info)?.[1] ?? 0);
  if (connected < wanted) {
    log.warn({ connected, wanted }, 'the Redis primary has fewer connected replicas than REDIS_MIN_REPLICAS_ACK: writes that need their acknowledgement will be refused (503) until enough are back');
  }
}

function redisTargetKind(url: string): string | undefined {
  const target = parseRedisUrl(url);
  return 'error' in target ? undefined : target.kind;
}
