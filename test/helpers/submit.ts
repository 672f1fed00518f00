import { RedisArtifactStore } from '../../src/lib/artifacts/redis-store.ts';
import type { Config } from '../../src/lib/config/index.ts';
import type { Keys } from '../../src/lib/keys.ts';
import type { Redis } from '../../src/lib/redis/redis.ts';
import { RunStore } from '../../src/lib/engine/store.ts';
import { Submissions, type SubmitEvents } from '../../src/lib/engine/submissions.ts';
import type { SubmitLimit } from '../../src/lib/transitions/submit.ts';
import type { ApiGateway } from '../../src/lib/transitions/api-gateway.ts';
import { WorkerRegistry } from '../../src/lib/engine/flow/worker-registry.ts';
import type { Harness } from './harness.ts';

export interface DoorOptions {
  /** The scope's submit rate limit the door applies (default: none but the scope's own). */
  limit?: SubmitLimit;
  events?: SubmitEvents;
}

/**
 * The submit door (Submissions, src/lib/engine/submissions.ts) on `redis`, built as
 * openResources builds it: tests and benchmarks submit by the door every run takes, with its
 * checks (output schema in the process's shared guard, artifacts, the registry's agents).
 */
export function submitDoor(redis: Redis, keys: Keys, config: Config, transitions: ApiGateway, o: DoorOptions = {}): Submissions {
  return new Submissions({
    redis, keys, config, transitions, store: new RunStore(redis, keys, config, transitions),
    artifacts: new RedisArtifactStore(redis, keys, transitions, config),
    registry: new WorkerRegistry(redis, keys, config.LEASE_MS),
    limit: o.limit, ...(o.events ? { events: o.events } : {}),
  });
}

/** The submit door on the harness's connection and config; `transitions` defaults to a new API gateway of the harness. */
export function doorOf(h: Harness, o: DoorOptions & { transitions?: ApiGateway } = {}): Submissions {
  return submitDoor(h.redis, h.keys, h.config, o.transitions ?? h.gateways().api, o);
}
