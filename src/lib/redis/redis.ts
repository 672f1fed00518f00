import { isNotConnectionError } from 'bullmq';
import { Cluster, Redis, type RedisOptions as IORedisOptions } from 'ioredis';
import type { Logger } from '../logger.ts';
import { parseRedisUrl, type RedisTarget } from '../config/redis-url.ts';
import { followSwitches } from './sentinel-switches.ts';
import { isRedisUnavailable } from './errors.ts';

// Kept in errors.ts (no ioredis load) for the sdk's retry rules; its users here import it from this file.
export { isRedisUnavailable };

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
  /**
   * A connection that subscribes: on a Cluster it also keeps one subscriber per primary, so
   * that SSUBSCRIBE reaches the node of each channel's slot (LIVE_PUBSUB=sharded).
   */
  subscriber?: boolean;
  /** Connection health for metrics (see metrics.ts); names are fixed per role, so labels stay bounded. */
  events?: ConnectionEvents;
  /** ioredis options over the ones above, for a client that must behave otherwise (a test's fake provider). */
  tune?: Pick<IORedisOptions, 'maxRetriesPerRequest' | 'autoResendUnfulfilledCommands' | 'retryStrategy'>;
}

export interface ConnectionEvents {
  opened(connection: string): void;
  error(connection: string): void;
  reconnected(connection: string): void;
}

/**
 * One place that opens Redis connections (the transitions' library is loaded into a server
 * by its first call that finds it missing: scripts.ts).
 *
 * A cluster URL yields an ioredis Cluster. It is returned under the `Redis` type on
 * purpose: Baton only sends commands whose keys share one slot (a scope's keys share a hash
 * tag, a queue's keys share its runtime's tag), which Cluster routes like a single node.
 *
 * A sentinel URL yields a connection that asks the Sentinels for the primary each time it
 * connects (sentinelOptions), so a failover is a reconnect, for BullMQ's connections too:
 * BullMQ duplicates the connection it is given, options and all.
 */
export function createRedis({ url, name, logger, blocking = false, subscriber = false, events, tune }: RedisOptions): Redis {
  const options = {
    connectionName: `baton:${name}`,
    maxRetriesPerRequest: blocking ? null : 2,
    enableReadyCheck: true,
    // Reconnect quickly, then back off to 2 s: a restarted Redis is back in seconds.
    retryStrategy: (times: number) => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    lazyConnect: false,
    ...tune,
  };
  const target = parseRedisUrl(url);
  if ('error' in target) throw new Error(`REDIS_URL ${target.error}`);
  let redis: Redis;
  if (target.kind === 'cluster') {
    redis = new Cluster(target.nodes, {
      redisOptions: { ...options, username: target.username, password: target.password },
      clusterRetryStrategy: options.retryStrategy,
      enableReadyCheck: true,
      shardedSubscribers: subscriber,
    }) as unknown as Redis;
  } else if (target.kind === 'sentinel') {
    redis = new Redis({ ...options, ...sentinelOptions(target) });
    followSwitches(target, redis);
    subscribeWhenReady(redis);
  } else {
    redis = new Redis(url, options);
    subscribeWhenReady(redis);
  }
  events?.opened(name);
  watchConnection(redis, name, name, logger, events);
  return redis;
}

/**
 * Subscriptions are sent once the connection is ready. SUBSCRIBE is a command Redis takes while
 * it loads, so ioredis writes it during the handshake, and it can reach the server ahead of the
 * ready check's INFO (seen with Sentinel, where the primary is looked up first): the server
 * refuses the INFO (a subscribed connection takes only pub/sub commands), ioredis drops the
 * connection before it was ever ready, and it resubscribes only a connection that was ready,
 * so it comes back deaf for good: a hub that hears no events, a worker no cancels
 * (test/sentinel.test.ts caught it in about 1 of 5 runs).
 */
function subscribeWhenReady(redis: Redis): void {
  for (const name of ['subscribe', 'psubscribe', 'ssubscribe'] as const) {
    const send = redis[name].bind(redis) as (...args: unknown[]) => Promise<unknown>;
    (redis as unknown as Record<string, unknown>)[name] = async (...args: unknown[]) => {
      await untilReady(redis);
      return send(...args);
    };
  }
}

/** Resolves once the connection is ready (at once if it is); rejects if it ends first. */
function untilReady(redis: Redis): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const onReady = () => { cleanup(); resolve(); };
    const onEnd = () => { cleanup(); reject(new Error('Connection is closed.')); };
    const cleanup = () => { redis.off('ready', onReady); redis.off('end', onEnd); };
    redis.on('ready', onReady);
    redis.on('end', onEnd);
  });
}

/**
 * Logs a connection's state changes, one JSON line each: `redis connection lost` when it
 * drops (or `redis connection failed` when it never came up), with the error when one is
 * known, and `redis reconnected` when it is ready again. Retries in between say nothing: a
 * Redis down for a minute costs each connection two lines, never one per attempt (ioredis
 * retries every 2 s at most), and errors reach the metrics (baton_redis_errors_total) only.
 *
 * Its copies are watched too, as `<name>:<n>`: BullMQ duplicates the connection it is given
 * for each worker (a command and a blocking connection), and those are the ones that wait
 * on Redis longest. Their errors also reach BullMQ's 'error' events, which the worker keeps
 * out of its log for that reason (worker.ts).
 */
function watchConnection(
  redis: Redis, name: string, metricsName: string, logger: Logger | undefined, events: ConnectionEvents | undefined,
): void {
  let state: 'connecting' | 'up' | 'down' = 'connecting';
  const down = (err?: Error) => {
    if (state === 'down') return;
    logger?.warn({ connection: name, err: err?.message }, state === 'up' ? 'redis connection lost' : 'redis connection failed');
    state = 'down';
  };
  redis.on('ready', () => {
    if (state === 'down') {
      logger?.warn({ connection: name }, 'redis reconnected');
      events?.reconnected(metricsName);
    }
    state = 'up';
  });
  // Emitted only when ioredis reconnects on its own (the connection dropped), never after quit().
  redis.on('reconnecting', () => down());
  redis.on('error', (err) => {
    events?.error(metricsName);
    down(err);
  });
  let copies = 0;
  const duplicate = redis.duplicate.bind(redis) as (...args: unknown[]) => Redis;
  redis.duplicate = ((...args: unknown[]) => {
    const copy = duplicate(...args);
    watchConnection(copy, `${name}:${++copies}`, metricsName, logger, events);
    return copy;
  }) as Redis['duplicate'];
}

/**
 * How a connection follows Sentinel to the current primary through a failover:
 * - every (re)connect asks the Sentinels for the primary, and the ready check (INFO) refuses
 *   a server whose role is not master, so a reconnect never settles on a replica;
 * - when the Sentinels announce a switch, a connection still on the old primary (demoted,
 *   not dead) reconnects at once (sentinel-switches.ts; not ioredis's `failoverDetector`,
 *   which can leave a connection closed for good);
 * - a READONLY answer means the server it is on was demoted under it: it reconnects and sends
 *   that command again (2). A replica refuses a write before running any of it, so the
 *   command did nothing there and is safe to send once more.
 */
function sentinelOptions(t: Extract<RedisTarget, { kind: 'sentinel' }>) {
  return {
    sentinels: t.sentinels,
    name: t.masterName,
    username: t.username,
    password: t.password,
    sentinelUsername: t.sentinelUsername,
    sentinelPassword: t.sentinelPassword,
    reconnectOnError: (err: Error) => (err.message.startsWith('READONLY') ? 2 : false) as 2 | false,
    ...(t.tls ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
  };
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

/** Socket errors of a connection to Redis that could not be made or was cut. */
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNABORTED']);

/**
 * Whether an error only says that Redis cannot be reached right now: a socket error (by its
 * code), a command that gave up on an unreachable Redis (isRedisUnavailable), or a command
 * cut by a closing connection (as BullMQ tells its own). The connections log these once per
 * state change (watchConnection), so the loops that meet them every second do not log them again.
 */
export function isConnectionLoss(err: unknown): boolean {
  if (isRedisUnavailable(err)) return true;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && SOCKET_ERRORS.has(code)) return true;
  return err instanceof Error && !isNotConnectionError(err);
}
