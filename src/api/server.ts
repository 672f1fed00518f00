import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RuntimeAdmin } from '../lib/tenancy/admin.ts';
import { ApiKeyStore, parseBootstrapKeys } from '../lib/tenancy/api-keys.ts';
import type { Config } from '../lib/config.ts';
import { Dispatcher } from '../lib/engine/dispatcher.ts';
import { EventHub } from '../lib/streams/hub.ts';
import { redisCheck, type ReadinessCheck } from '../lib/ops/health.ts';
import { createKeys } from '../lib/keys.ts';
import type { Logger } from '../lib/logger.ts';
import { Metrics, QUEUE_STATES } from '../lib/ops/metrics.ts';
import { createRedis, waitReady, type Redis } from '../lib/redis.ts';
import { SubmitRateLimiter } from '../lib/tenancy/rate-limit.ts';
import { RunStore } from '../lib/engine/store.ts';
import { Sweeper } from '../lib/engine/sweeper.ts';
import { WorkerRegistry } from '../lib/tenancy/worker-registry.ts';
import { createApp } from './app.ts';

export interface ApiHandle {
  url: string;
  port: number;
  server: Server;
  redis: Redis;
  metrics: Metrics;
  close(): Promise<void>;
}

export interface ApiOptions {
  config: Config;
  redisUrl: string;
  log: Logger;
  /** The process's metrics registry (`baton start` shares one with its worker); else the API makes its own. */
  metrics?: Metrics;
  /** Readiness of other components of this process (a co-hosted worker), added to /readyz. */
  checks?: readonly ReadinessCheck[];
}

/** Starts the HTTP API (and this process's sweeper) on HOST:PORT; PORT 0 picks a free port. */
export async function startApi(o: ApiOptions): Promise<ApiHandle> {
  const { config: c } = o;
  const log = o.log.child({ component: 'api' });
  const metrics = o.metrics ?? new Metrics({ scopeLabel: c.METRICS_SCOPE_LABEL, labelLimit: c.METRICS_LABEL_LIMIT });
  const keys = createKeys(c.BATON_KEY_PREFIX);
  const events = metrics.redisEvents;
  const redis = createRedis({ url: o.redisUrl, name: 'api-cmd', logger: log, events });
  const bullConn = createRedis({ url: o.redisUrl, name: 'api-bull', logger: log, blocking: true, events });
  const subscriber = createRedis({ url: o.redisUrl, name: 'api-sub', logger: log, blocking: true, events });
  await waitReady(redis);
  const dispatcher = new Dispatcher(bullConn, keys);
  const countJobs = (runtime: string) => dispatcher.queue(runtime).getJobCounts(...QUEUE_STATES);
  const store = new RunStore(redis, keys, c, dispatcher, {
    submitted(run) {
      metrics.runSubmitted(run);
      // The API exports the queue depth of every runtime it has submitted to (bounded by METRICS_LABEL_LIMIT).
      metrics.watchQueue(run.runtime, countJobs);
    },
    cancelled: (run) => metrics.runFinished(run, 'cancelled'),
  });
  const hub = new EventHub(subscriber, log);
  const sweeper = new Sweeper(redis, keys, c, dispatcher, log);
  const apiKeys = new ApiKeyStore(redis, keys);
  for (const k of parseBootstrapKeys(c.BATON_BOOTSTRAP_KEYS ?? '')) await apiKeys.ensure(k.scope, k.role, k.key);
  const registry = new WorkerRegistry(redis, keys, c.LEASE_MS);
  const admin = new RuntimeAdmin(redis, keys, c, dispatcher, registry);
  const submitLimiter = new SubmitRateLimiter(redis, keys, c);
  const checks = [redisCheck(redis), ...(o.checks ?? [])];
  const app = createApp({ config: c, redis, keys, store, hub, apiKeys, log, admin, registry, submitLimiter, metrics, checks });
  const server = createServer(app);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(c.PORT, c.HOST, () => resolve());
  });
  sweeper.start();
  const { port } = server.address() as AddressInfo;
  const host = c.HOST.includes(':') ? `[${c.HOST}]` : c.HOST;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  log.info({ url }, 'api listening');

  let closing: Promise<void> | undefined;
  return {
    url, port, server, redis, metrics,
    close() {
      closing ??= (async () => {
        await sweeper.stop();
        // Open SSE streams would keep close() waiting forever; clients resume elsewhere by id.
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await dispatcher.close();
        await Promise.all([redis.quit(), bullConn.quit(), subscriber.quit()].map((p) => p.catch(() => {})));
      })();
      return closing;
    },
  };
}
