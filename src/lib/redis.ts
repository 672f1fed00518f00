import { Cluster, Redis } from 'ioredis';
import type { Logger } from './logger.ts';

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
  /** Connection health for metrics (see metrics.ts); names are fixed per role, so labels stay bounded. */
  events?: ConnectionEvents;
}

export interface ConnectionEvents {
  opened(connection: string): void;
  error(connection: string): void;
  reconnected(connection: string): void;
}

/** `redis+cluster://[user:pass@]host:port,host:port` names Redis Cluster seed nodes. */
export const CLUSTER_SCHEME = 'redis+cluster:';

export function isClusterUrl(url: string): boolean {
  return url.startsWith(`${CLUSTER_SCHEME}//`);
}

function clusterSeeds(url: string): { nodes: { host: string; port: number }[]; username?: string; password?: string } {
  const rest = url.slice(CLUSTER_SCHEME.length + 2);
  const at = rest.lastIndexOf('@');
  const auth = at >= 0 ? rest.slice(0, at) : '';
  const hosts = (at >= 0 ? rest.slice(at + 1) : rest).replace(/\/.*$/, '');
  const nodes = hosts.split(',').filter(Boolean).map((hp) => {
    const i = hp.lastIndexOf(':');
    return { host: hp.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(hp.slice(i + 1)) };
  });
  const [username, password] = auth.includes(':') ? auth.split(':', 2).map(decodeURIComponent) : [undefined, auth ? decodeURIComponent(auth) : undefined];
  return { nodes, username: username || undefined, password };
}

/**
 * One place that opens Redis connections (the transitions' library is loaded into a server
 * by its first call that finds it missing: scripts.ts).
 *
 * A cluster URL yields an ioredis Cluster. It is returned under the `Redis` type on
 * purpose: Baton only sends commands whose keys share one slot (a scope's keys share a hash
 * tag, a queue's keys share its runtime's tag), which Cluster routes like a single node.
 */
export function createRedis({ url, name, logger, blocking = false, events }: RedisOptions): Redis {
  const options = {
    connectionName: `baton:${name}`,
    maxRetriesPerRequest: blocking ? null : 2,
    enableReadyCheck: true,
    // Reconnect quickly, then back off to 2 s: a restarted Redis is back in seconds.
    retryStrategy: (times: number) => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    lazyConnect: false,
  };
  let redis: Redis;
  if (isClusterUrl(url)) {
    const seeds = clusterSeeds(url);
    redis = new Cluster(seeds.nodes, {
      redisOptions: { ...options, username: seeds.username, password: seeds.password },
      clusterRetryStrategy: options.retryStrategy,
      enableReadyCheck: true,
    }) as unknown as Redis;
  } else {
    redis = new Redis(url, options);
  }
  events?.opened(name);
  let wasUp = false;
  redis.on('ready', () => {
    if (wasUp) {
      logger?.warn({ connection: name }, 'redis reconnected');
      events?.reconnected(name);
    }
    wasUp = true;
  });
  redis.on('error', (err) => {
    events?.error(name);
    logger?.debug({ connection: name, err: err.message }, 'redis error');
  });
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

/** Redis's own clock in ms: leases, registry beats and ages are all measured against it. */
export async function redisNowMs(redis: Redis): Promise<number> {
  const [secs, micros] = await redis.time();
  return Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
}

/**
 * Whether a command failed because Redis could not be reached (it was retried on the
 * command connection until maxRetriesPerRequest, or no Cluster node answered). Decided by
 * the error's type as ioredis names it, never by its message. The API answers these with
 * 503 REDIS_UNAVAILABLE; inside a run they are transient, because Redis comes back.
 */
export function isRedisUnavailable(err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name;
  // ReplicaAckError (replica-acks.ts): a write too few replicas acknowledged.
  return name === 'MaxRetriesPerRequestError' || name === 'ClusterAllFailedError' || name === 'ReplicaAckError';
}
