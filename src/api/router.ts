import type { IncomingMessage, ServerResponse } from 'node:http';
import express from 'express';
import type { Registry } from 'prom-client';
import { ConfigError, loadConfig, type Config } from '../lib/config/index.ts';
import type { ReadinessCheck } from '../lib/ops/health.ts';
import { createLogger, type Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import type { Redis } from '../lib/redis/redis.ts';
import { openResources, type Resources } from '../lib/process/resources.ts';
import { createApp } from './app.ts';
import { apiDeps } from './deps.ts';

export interface BatonRouterOptions {
  /** Settings, as `loadConfig(env)` makes them; default: from process.env. PORT and HOST are unused (the host app listens). */
  config?: Config;
  /** Default: the config's REDIS_URL. */
  redisUrl?: string;
  /** Default: a pino logger at the config's LOG_LEVEL. */
  log?: Logger;
  /**
   * The host app's prom-client registry. Baton registers its own metrics in it, so the app's
   * /metrics shows them; process metrics (process_*, nodejs_*) are left to the host. Without
   * it Baton keeps a registry of its own, served at `<mount>/metrics`.
   */
  registry?: Registry;
  /** Readiness of other parts of the process (a worker started in it), added to `<mount>/readyz`. */
  checks?: readonly ReadinessCheck[];
}

/** A Node request handler, what Express's `app.use` takes (typed without Express's own types). */
export type NodeHandler = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;

export interface BatonRouter {
  /** The API, to mount under a path: `app.use('/agents', baton.router)` serves `/agents/v1/...`. */
  router: NodeHandler;
  /** Baton's metrics; give it to `startWorker({ metrics })` to count a worker of this process in the same registry. */
  metrics: Metrics;
  redis: Redis;
  /** The process's composition root this router runs on; `startWorker({ resources })` shares it. */
  resources: Resources;
  /** Stops the sweeper, ends Baton's open event streams (their clients resume by id) and closes Redis. Idempotent. */
  close(): Promise<void>;
}

/**
 * Baton's HTTP API as a handler for an existing Express 5 app: the same routes, auth,
 * validation and streams as `baton api`, served under the app's path and on its server.
 * The server's own settings are the host's: `baton api` sets headersTimeout and
 * requestTimeout (HTTP_HEADERS_TIMEOUT_MS, HTTP_REQUEST_TIMEOUT_MS); a host should set them
 * on its server too (README, "Embedding in an Express app"). The minimum body rate is Baton's and applies.
 *
 * It opens the process's composition root (connections, sweeper) and wires the API on it
 * the way startApi does, without a listening server.
 */
export async function createBatonRouter(o: BatonRouterOptions = {}): Promise<BatonRouter> {
  const c = o.config ?? loadConfig();
  const redisUrl = o.redisUrl ?? c.REDIS_URL;
  if (!redisUrl) throw new ConfigError('createBatonRouter needs a Redis: pass redisUrl or set REDIS_URL');
  // Not a child with `component`: apiDeps adds it to the API's lines, and only there.
  const log = o.log ?? createLogger(c.LOG_LEVEL);
  // Baton's metrics go into the host's registry when given (one router per registry: a clash
  // is refused before anything is registered or connected), else into one of its own.
  const resources = await openResources({ config: c, redisUrl, log, hostRegistry: o.registry, role: 'api' });
  let app: express.Express;
  try {
    app = createApp(await apiDeps(resources, o.checks));
  } catch (err) {
    await resources.close();
    throw err;
  }

  // The host's server is not Baton's to close, so Baton ends its own open responses (event
  // streams stay open for a run's length and would keep the host's server.close() waiting).
  const open = new Set<ServerResponse>();
  let closing: Promise<void> | undefined;
  // An Express app of its own around Baton's: Express mounts an app (settings, req.app,
  // prototypes restored on the way out) where it would only call a plain function.
  const router = express();
  router.use((req, res, next) => {
    // Closed: the request goes back to the host app's own routes.
    if (closing) return next('router');
    open.add(res);
    res.once('close', () => open.delete(res));
    next();
  });
  router.use(app);
  return {
    router, metrics: resources.metrics, redis: resources.redis, resources,
    close() {
      closing ??= (async () => {
        for (const res of open) res.destroy();
        await resources.close();
      })();
      return closing;
    },
  };
}
