import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from '../lib/config/index.ts';
import type { ReadinessCheck } from '../lib/ops/health.ts';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import type { Redis } from '../lib/redis/redis.ts';
import { openResources, type Resources } from '../lib/process/resources.ts';
import { withTimeout } from '../lib/timeout.ts';
import { createApp } from './app.ts';
import { apiDeps, type AppDeps } from './deps.ts';

export interface ApiHandle {
  url: string;
  port: number;
  server: Server;
  redis: Redis;
  metrics: Metrics;
  /**
   * Stops taking connections, then hands its open event streams over to a reconnect (each
   * ends with `retry:` and no `end`; its reader resumes from Last-Event-ID), then closes.
   * `streamsUntil`: keeps the open streams until it settles first (`baton start`: its worker
   * draining), so those whose run ends by then end with their `end` event. Idempotent.
   */
  close(o?: CloseOptions): Promise<void>;
}

export interface CloseOptions {
  streamsUntil?: Promise<unknown>;
}

/** After the hand-over, how long the streams' last bytes may take to leave before their connections are cut. */
const HANDOVER_FLUSH_MS = 1_000;

export type ApiOptions = (
  /** The process's composition root (`baton start` shares one with its worker). */
  | { resources: Resources }
  /** Standalone: the API opens (and closes) its own. */
  | { config: Config; redisUrl: string; log: Logger; metrics?: Metrics }
) & {
  /** Readiness of other components of this process (a co-hosted worker), added to /readyz. */
  checks?: readonly ReadinessCheck[];
};

/** Starts the HTTP API on HOST:PORT (PORT 0 picks a free port). */
export async function startApi(o: ApiOptions): Promise<ApiHandle> {
  const res = 'resources' in o ? o.resources : await openResources({ ...o, role: 'api' });
  const owned = !('resources' in o);
  const c = res.config;
  let server: Server;
  let deps: AppDeps;
  try {
    deps = await apiDeps(res, o.checks);
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
    close(c: CloseOptions = {}) {
      closing ??= (async () => {
        // No new connection from here; idle keep-alive ones close now.
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        if (c.streamsUntil) await Promise.race([c.streamsUntil.catch(() => {}), deps.openStreams.whenNone()]);
        // Open streams would keep close() waiting for ever: each ends with a reconnect hint,
        // and its reader resumes by id elsewhere (or here, once started again).
        deps.openStreams.handOver();
        await withTimeout(deps.openStreams.whenNone(), HANDOVER_FLUSH_MS);
        server.closeAllConnections();
        await closed;
        if (owned) await res.close();
      })();
      return closing;
    },
  };
}
