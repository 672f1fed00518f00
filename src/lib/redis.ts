import { Redis } from 'ioredis';
import type { Logger } from './logger.ts';
import { registerScripts } from './scripts.ts';

export type { Redis };

export interface RedisOptions {
  url: string;
  name: string;
  logger?: Logger;
  /**
   * Blocking/BullMQ connections must retry commands forever (BullMQ requires null);
   * request-path connections fail fast so an API caller gets a 503 instead of a hang.
   */
  blocking?: boolean;
}

/** One place that opens Redis connections, with Baton's scripts registered on each. */
export function createRedis({ url, name, logger, blocking = false }: RedisOptions): Redis {
  const redis = new Redis(url, {
    connectionName: `baton:${name}`,
    maxRetriesPerRequest: blocking ? null : 2,
    enableReadyCheck: true,
    // Reconnect quickly, then back off to 2 s: a restarted Redis is back in seconds.
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    lazyConnect: false,
  });
  registerScripts(redis);
  let wasUp = false;
  redis.on('ready', () => {
    if (wasUp) logger?.warn({ connection: name }, 'redis reconnected');
    wasUp = true;
  });
  redis.on('error', (err) => logger?.debug({ connection: name, err: err.message }, 'redis error'));
  return redis;
}

/** Waits until the connection is ready or fails with the connection's error. */
export async function waitReady(redis: Redis, timeoutMs = 10_000): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`redis not ready after ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = () => { cleanup(); resolve(); };
    const cleanup = () => { clearTimeout(timer); redis.off('ready', onReady); };
    redis.on('ready', onReady);
  });
}
