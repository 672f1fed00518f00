import type { Redis } from 'ioredis';
import type { RuntimeAdmin } from '../lib/tenancy/admin.ts';
import type { ApiKeyStore } from '../lib/tenancy/api-keys.ts';
import type { StreamTokenStore } from '../lib/tenancy/stream-tokens.ts';
import type { Config } from '../lib/config.ts';
import type { RunStreams } from '../lib/streams/run-streams.ts';
import type { OpenStreams } from '../lib/streams/open-streams.ts';
import type { ReadinessCheck } from '../lib/ops/health.ts';
import type { Keys } from '../lib/keys.ts';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import type { RunStore } from '../lib/engine/store.ts';
import type { SchemaGuard } from '../lib/engine/schema-guard.ts';
import type { SubmitLimit } from '../lib/engine/transitions.ts';
import type { WorkerRegistry } from '../lib/tenancy/worker-registry.ts';
import type { ArtifactStore } from '../lib/artifacts/artifact-store.ts';
import type { WaitStore } from '../lib/engine/wait-store.ts';
import type { WaitTokens } from '../lib/engine/wait-tokens.ts';

/** What the HTTP layer needs from the process that hosts it. */
export interface AppDeps {
  config: Config;
  redis: Redis;
  keys: Keys;
  store: RunStore;
  apiKeys: ApiKeyStore;
  /** Read-only tokens for browser pages, accepted by the routes of access `stream`. */
  streamTokens: StreamTokenStore;
  streams: RunStreams;
  /** The event streams open in this process: their caps, and their end when a key is revoked. */
  openStreams: OpenStreams;
  log: Logger;
  /** The process's Prometheus registry (shared with a worker in the same process). */
  metrics: Metrics;
  /** What /readyz requires: Redis, plus the readiness of a worker hosted in this process. */
  checks: readonly ReadinessCheck[];
  admin: RuntimeAdmin;
  registry: WorkerRegistry;
  /** The scope's submit rate limit (undefined: off), taken by the submit script. */
  submitLimit: SubmitLimit | undefined;
  /** Compiles outputSchemas off the event loop; unset: the process's shared guard. */
  schemaGuard: SchemaGuard;
  /** Where input artifacts are stored. */
  artifacts: ArtifactStore;
  /** Resumes waits (by key, or by resume token). */
  waits: WaitStore;
  /** Shows pending waits' resume tokens to keys of their scope. */
  waitTokens: WaitTokens;
}
