import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiKeyStore, parseBootstrapKeys } from '../lib/api-keys.ts';
import type { Config } from '../lib/config.ts';
import { Dispatcher } from '../lib/dispatcher.ts';
import { EventHub } from '../lib/event-hub.ts';
import { createKeys } from '../lib/keys.ts';
import type { Logger } from '../lib/logger.ts';
import { createRedis, waitReady, type Redis } from '../lib/redis.ts';
import { RunStore } from '../lib/run-store.ts';
import { Sweeper } from '../lib/sweeper.ts';
import { createApp } from './app.ts';

export interface ApiHandle {
  url: string;
  port: number;
  server: Server;
  redis: Redis;
  close(): Promise<void>;
}

/** Starts the HTTP API (and this process's sweeper) on HOST:PORT; PORT 0 picks a free port. */
export async function startApi(o: { config: Config; redisUrl: string; log: Logger }): Promise<ApiHandle> {
  const { config: c } = o;
  const log = o.log.child({ component: 'api' });
  const keys = createKeys(c.BATON_KEY_PREFIX);
  const redis = createRedis({ url: o.redisUrl, name: 'api-cmd', logger: log });
  const bullConn = createRedis({ url: o.redisUrl, name: 'api-bull', logger: log, blocking: true });
  const subscriber = createRedis({ url: o.redisUrl, name: 'api-sub', logger: log, blocking: true });
  await waitReady(redis);
  const dispatcher = new Dispatcher(bullConn, keys);
  const store = new RunStore(redis, keys, c, dispatcher);
  const hub = new EventHub(subscriber, log);
  const sweeper = new Sweeper(redis, keys, c, dispatcher, log);
  const apiKeys = new ApiKeyStore(redis, keys);
  for (const k of parseBootstrapKeys(c.BATON_BOOTSTRAP_KEYS ?? '')) await apiKeys.ensure(k.scope, k.role, k.key);
  const app = createApp({ config: c, redis, keys, store, hub, apiKeys, log });
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
    url, port, server, redis,
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
