import { z } from 'zod';
import { intMs, bool } from './values.ts';
import { parseRedisUrl } from './redis-url.ts';

/** The most queue partitions a runtime may have (QUEUE_PARTITIONS). */
export const MAX_QUEUE_PARTITIONS = 64;

/** The process: its Redis, where it listens, what it logs and traces, the runtime it serves, its metrics and the keys it starts with. */
export const processVars = {
  /**
   * REDIS_URL: `redis://` or `rediss://` for one Redis, `redis+cluster://host:port,host:port`
   * for Redis Cluster seed nodes, `redis+sentinel://host:port,host:port/<masterName>` (or
   * `rediss+sentinel://`) for a primary that Sentinel fails over (redis-url.ts reads them all).
   * Unset: `baton start` spawns a local redis-server under .baton/redis.
   */
  REDIS_URL: z
    .string()
    .superRefine((url, ctx) => {
      const target = parseRedisUrl(url);
      if ('error' in target) ctx.addIssue({ code: 'custom', message: target.error });
    })
    .optional(),
  /**
   * REDIS_MIN_REPLICAS_ACK: replicas that must hold a submit, a step's write, a stream's events,
   * a finish with its history, a wait's or a blocked step's resolution or a cancel before it is
   * answered (WAIT; REPLICATED in transitions/caller.ts lists them). 0 (default):
   * answered once the primary has it, and a failover can lose the last writes.
   */
  REDIS_MIN_REPLICAS_ACK: z.coerce.number().int().min(0).max(16).default(0),
  /**
   * REDIS_REPLICA_ACK_TIMEOUT_MS: how long such a write waits for its acknowledgements before
   * it is answered as 503 REDIS_UNAVAILABLE (a worker retries it). 2 s: replicas acknowledge in
   * about a round trip; longer means one is gone or far behind.
   */
  REDIS_REPLICA_ACK_TIMEOUT_MS: z.coerce.number().int().min(1).max(60_000).default(2_000),
  /**
   * LIVE_PUBSUB: how scripts announce a scope's new events. `classic` (default) is PUBLISH,
   * which Redis Cluster copies to every node; `sharded` is SPUBLISH, kept on the scope's node
   * (docs/operations.md, "Live notifications on a Cluster"). Every process of this release
   * listens to both, so turn `sharded` on once no process of an earlier release runs, and back to
   * `classic` before rolling back to one.
   */
  LIVE_PUBSUB: z.enum(['classic', 'sharded']).default('classic'),
  /** PORT for the HTTP API. 3000: the usual local development port. */
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  /** HOST the API binds to. 127.0.0.1 keeps a dev instance off the network; compose sets 0.0.0.0. */
  HOST: z.string().min(1).default('127.0.0.1'),
  /** METRICS_PORT where a standalone worker serves /metrics, /healthz, /readyz. 0 = a free port. */
  METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(9464),
  /** LOG_LEVEL for pino. */
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /**
   * BATON_TRACE_CONTENT: spans carry a run's input text, what a model streamed, tools'
   * arguments (docs/tracing.md). false: they carry names, keys, counts and times only, since a
   * trace backend is seldom cleared to hold what tenants and their users wrote.
   */
  BATON_TRACE_CONTENT: bool(false),
  /**
   * BATON_TRACE_CALLER: what a client's `traceparent` header makes of a submit's span.
   * `link` (default): the run starts a trace of its own, whose `baton.submit` links to the
   * caller's span; `parent`: `baton.submit` is the caller's span's child, in the caller's trace.
   * A link, because the header is a tenant's to write: as a parent it would put the run's spans
   * into any trace id the tenant knows (another tenant's, the operator's own). `parent` suits a
   * deployment whose callers are all its own services (docs/tracing.md).
   */
  BATON_TRACE_CALLER: z.enum(['link', 'parent']).default('link'),
  /** BATON_KEY_PREFIX: first segment of every Redis key, so Baton can share a Redis. */
  BATON_KEY_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$/, 'letters, digits, . _ - (max 32)')
    .default('baton'),
  /** RUNTIME this worker serves (one BullMQ queue per runtime). */
  RUNTIME: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/).default('default'),
  /** WORKER_CONCURRENCY: runs one worker process executes at once. Agent runs mostly wait on I/O. */
  WORKER_CONCURRENCY: z.coerce.number().int().min(1).max(1000).default(16),
  /**
   * QUEUE_PARTITIONS: the BullMQ queues (per agent) a runtime's runs are spread over, each on a
   * Redis Cluster slot of its own, so one runtime's queue work is not one node's. A worker
   * raises its runtime's recorded count to this when it starts, never lowers it, and every
   * worker consumes every partition of the recorded count (src/lib/engine/dispatcher.ts). 1 (the
   * default) is one queue per agent, as before partitions; on a single Redis, partitions
   * change nothing but the number of queues.
   */
  QUEUE_PARTITIONS: z.coerce.number().int().min(1).max(MAX_QUEUE_PARTITIONS).default(1),
  /** SHUTDOWN_GRACE_MS: on SIGTERM, in-flight runs get this long before their leases are handed over. */
  SHUTDOWN_GRACE_MS: intMs(10_000),
  /**
   * METRICS_TOKEN: when set, /metrics (the API's and a worker's) answers only requests with
   * `Authorization: Bearer <token>` (401 otherwise), for deployments whose metrics port is
   * reachable by more than the scraper. 16+ printable characters. Unset: open, as Prometheus
   * expects by default; /healthz and /readyz stay open either way.
   */
  METRICS_TOKEN: z.string().regex(/^[\x21-\x7e]{16,256}$/, '16-256 printable characters, no spaces').optional(),
  /** METRICS_SCOPE_LABEL: add the scope label to run metrics (unbounded cardinality, opt in). */
  METRICS_SCOPE_LABEL: bool(false),
  /**
   * METRICS_LABEL_LIMIT: distinct runtime and agent label values one process exports; later
   * ones are folded into "_other". 100: far more pools and agents than a deployment runs,
   * yet a client submitting made-up names cannot grow Prometheus without bound.
   */
  METRICS_LABEL_LIMIT: z.coerce.number().int().min(1).max(10_000).default(100),
  /**
   * BATON_BOOTSTRAP_KEYS: API keys declared at start, `scope:role:key` separated by commas
   * (for compose files and tests). Keys made with `baton keys create` need no restart.
   */
  BATON_BOOTSTRAP_KEYS: z.string().optional(),
};
