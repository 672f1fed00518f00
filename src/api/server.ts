import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseBootstrapKeys, type Config } from '../lib/config.ts';
import { EventHub } from '../lib/streams/hub.ts';
import { RunStreams } from '../lib/streams/run-streams.ts';
import { OpenStreams } from '../lib/streams/open-streams.ts';
import { redisCheck, type ReadinessCheck } from '../lib/ops/health.ts';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import { QUEUE_STATES } from '../lib/ops/metrics.ts';
import type { Redis } from '../lib/redis.ts';
import { openResources, type Resources } from '../lib/resources.ts';
import { RunStore } from '../lib/engine/store.ts';
import { WaitStore } from '../lib/engine/wait-store.ts';
import { waitingRuns } from '../lib/ops/waiting-runs.ts';
import { ApiKeyStore } from '../lib/tenancy/api-keys.ts';
import { RuntimeAdmin } from '../lib/tenancy/admin.ts';
import { submitLimit } from '../lib/tenancy/rate-limit.ts';
import { StreamTokenStore } from '../lib/tenancy/stream-tokens.ts';
import { WorkerRegistry } from '../lib/tenancy/worker-registry.ts';
import { createApp } from './app.ts';
import type { AppDeps } from './deps.ts';

export interface ApiHandle {
  url: string;
  port: number;
  server: Server;
  redis: Redis;
  metrics: Metrics;
  close(): Promise<void>;
}

export type ApiOptions = (
  /** The process's composition root (`baton start` shares one with its worker). */
  | { resources: Resources }
  /** Standalone: the API opens (and closes) its own. */
  | { config: Config; redisUrl: string; log: Logger; metrics?: Metrics }
) & {
  /** Readiness of other components of this process (a co-hosted worker), added to /readyz. */
  checks?: readonly ReadinessCheck[];
};

/** What the HTTP layer needs, built on a process's resources. */
export async function apiDeps(res: Resources, checks: readonly ReadinessCheck[] = []): Promise<AppDeps> {
  const { config: c, redis, keys, metrics, dispatcher, transitions } = res;
  const log = res.log.child({ component: 'api' });
  const countJobs = (runtime: string) => dispatcher.jobCounts(runtime, QUEUE_STATES);
  const store = new RunStore(redis, keys, c, transitions, {
    submitted(run) {
      metrics.runSubmitted(run);
      // The API exports the queue depth and waiting runs of every registered runtime it has submitted to (bounded by METRICS_LABEL_LIMIT).
      metrics.watchQueue(run.runtime, countJobs);
      metrics.watchWaiting(run.runtime, (rt) => waitingRuns(redis, keys, rt));
    },
    cancelled: (run) => metrics.runFinished(run, 'cancelled'),
    deadline: (scope, member, at) => res.sweeper.soon(scope, member, at),
  }, res.schemaGuard);
  const waits = new WaitStore(redis, keys, transitions, (scope, runId) => store.get(scope, runId), res.schemaGuard, {
    resumed: (wait) => metrics.waitEnded(wait.runtime, wait, 'resumed'),
  });
  const apiKeys = new ApiKeyStore(redis, keys);
  for (const k of parseBootstrapKeys(c.BATON_BOOTSTRAP_KEYS ?? '')) await apiKeys.ensure(k.scope, k.role, k.key);
  // Runtimes become label values of the API's metrics once their workers are seen live.
  const registry = new WorkerRegistry(redis, keys, c.LEASE_MS, (runtime, agents) => {
    metrics.registerRuntime(runtime, agents);
    metrics.watchQueue(runtime, countJobs);
    metrics.watchWaiting(runtime, (rt) => waitingRuns(redis, keys, rt));
  });
  return {
    config: c, redis, keys, store, log, metrics, registry, apiKeys, schemaGuard: res.schemaGuard, artifacts: res.artifacts,
    streamTokens: new StreamTokenStore(redis, keys, apiKeys, c.STREAM_TOKEN_TTL_MS, c.STREAM_TOKEN_MINT_PER_MIN),
    waits, waitTokens: res.waitTokens,
    streams: new RunStreams(redis, keys, new EventHub(res.subscriber, log)),
    openStreams: new OpenStreams({
      perKey: c.SSE_MAX_PER_KEY, perToken: c.SSE_MAX_PER_TOKEN, perScope: c.SSE_MAX_PER_SCOPE, retryAfterMs: c.SSE_STALL_MS,
      // Every keep-alive period, one pipeline for all keys with open streams.
      recheckMs: c.SSE_KEEPALIVE_MS,
      stillValid: (ids) => apiKeys.existing(ids),
      onRecheckError: (err) => log.warn({ err: err.message }, 'could not check the keys of open streams'),
    }),
    admin: new RuntimeAdmin(redis, keys, transitions, registry),
    submitLimit: submitLimit(c),
    checks: [redisCheck(redis), ...checks],
  };
}

/** Starts the HTTP API on HOST:PORT (PORT 0 picks a free port). */
export async function startApi(o: ApiOptions): Promise<ApiHandle> {
  const res = 'resources' in o ? o.resources : await openResources({ ...o, role: 'api' });
  const owned = !('resources' in o);
  const c = res.config;
  let server: Server;
  try {
    const deps = await apiDeps(res, o.checks);
    server = createServer({
      // Chosen for an API rather than Node's defaults (60 s for headers, 300 s for a request):
      // a client that trickles its headers or its body holds a socket for that long.
      headersTimeout: c.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeout: Math.max(c.HTTP_REQUEST_TIMEOUT_MS, c.HTTP_HEADERS_TIMEOUT_MS),
      // How often Node looks for requests past those timeouts (30 s by default, which would
      // add up to half a minute to each).
      connectionsCheckingInterval: Math.min(1_000, c.HTTP_HEADERS_TIMEOUT_MS),
    }, createApp(deps));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(c.PORT, c.HOST, () => resolve());
    });
  } catch (err) {
    if (owned) await res.close();
    throw err;
  }
  const { port } = server.address() as AddressInfo;
  const host = c.HOST.includes(':') ? `[${c.HOST}]` : c.HOST;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  res.log.info({ url, component: 'api' }, 'api listening');

  let closing: Promise<void> | undefined;
  return {
    url, port, server, redis: res.redis, metrics: res.metrics,
    close() {
      closing ??= (async () => {
        // Open SSE streams would keep close() waiting forever; clients resume elsewhere by id.
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        if (owned) await res.close();
      })();
      return closing;
    },
  };
}
