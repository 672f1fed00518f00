import type { ArtifactStore } from './artifacts/artifact-store.ts';
import { RedisArtifactStore } from './artifacts/redis-store.ts';
import type { Config } from './config.ts';
import { Dispatcher } from './engine/dispatcher.ts';
import { SchemaGuard } from './engine/schema-guard.ts';
import { Sweeper } from './engine/sweeper.ts';
import { Transitions } from './engine/transitions.ts';
import { WaitTokens } from './engine/wait-tokens.ts';
import { createKeys, type Keys } from './keys.ts';
import type { Logger } from './logger.ts';
import { Metrics } from './ops/metrics.ts';
import { createRedis, waitReady, type Redis } from './redis.ts';

/**
 * The composition root of one Baton process: its Redis connections, key builder, metrics
 * registry, dispatcher, transitions gateway and sweeper, made once and closed once.
 * `baton start` hosts the API and a worker on one of these; `baton api` and `baton worker`
 * each open their own. Domain code receives what it needs from here, never from the
 * environment.
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
  readonly transitions: Transitions;
  readonly sweeper: Sweeper;
  /** Where input artifacts are kept (the Redis store unless the process was given another). */
  readonly artifacts: ArtifactStore;
  /** Compiles and checks output schemas in a thread of its own, within a time budget. */
  readonly schemaGuard: SchemaGuard;
  /** Derives the resume tokens of waits (workers record their digests, the API shows and checks them). */
  readonly waitTokens: WaitTokens;
  /** Stops the sweeper, closes the queues, the connections and the schema thread. Idempotent. */
  close(): Promise<void>;
}

export interface ResourceOptions {
  config: Config;
  redisUrl: string;
  log: Logger;
  /** A registry to share (an application's own); else one is made for this process. */
  metrics?: Metrics;
  /** An S3-like store for input artifacts; default: Redis, under each scope. */
  artifacts?: ArtifactStore;
  /** What the process is (`api`, `worker`, `start`): its connections are named `<role>-cmd`, `-bull`, `-sub`. */
  role: string;
}

export async function openResources(o: ResourceOptions): Promise<Resources> {
  const { config: c, redisUrl: url, log } = o;
  const metrics = o.metrics ?? new Metrics({ scopeLabel: c.METRICS_SCOPE_LABEL, labelLimit: c.METRICS_LABEL_LIMIT });
  const keys = createKeys(c.BATON_KEY_PREFIX);
  const events = metrics.redisEvents;
  const redis = createRedis({ url, name: `${o.role}-cmd`, logger: log, events });
  const bull = createRedis({ url, name: `${o.role}-bull`, logger: log, blocking: true, events });
  const subscriber = createRedis({ url, name: `${o.role}-sub`, logger: log, blocking: true, events });
  const quit = () => Promise.all([redis, bull, subscriber].map((r) => r.quit().catch(() => {})));
  try {
    await waitReady(redis);
  } catch (err) {
    await quit();
    throw err;
  }
  const waitTokens = new WaitTokens(redis, keys, c.WAIT_TOKEN_SECRET);
  try {
    await waitTokens.load();
  } catch (err) {
    await quit();
    throw err;
  }
  const dispatcher = new Dispatcher(bull, keys);
  const transitions = new Transitions(redis, keys, c, dispatcher);
  // Every process sweeps: sweeps are idempotent, so more processes only repair sooner.
  const sweeper = new Sweeper(redis, keys, c, dispatcher, transitions, log, {
    waitsExpired: (runtime, waits) => metrics.waitsExpired(runtime, waits),
    finished: (run, status) => metrics.runFinished(run, status),
  });
  sweeper.start();
  const schemaGuard = new SchemaGuard({ maxQueuedPerScope: c.SCHEMA_CHECKS_PER_SCOPE });
  const artifacts = o.artifacts ?? new RedisArtifactStore(redis, keys, transitions, c);
  let closing: Promise<void> | undefined;
  return {
    config: c, log, keys, metrics, redis, bull, subscriber, dispatcher, transitions, sweeper, schemaGuard, artifacts, waitTokens,
    close() {
      closing ??= (async () => {
        await sweeper.stop();
        await dispatcher.close();
        await quit();
        await schemaGuard.close();
      })();
      return closing;
    },
  };
}
