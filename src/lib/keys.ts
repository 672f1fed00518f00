/**
 * The one place that knows Redis key names. Nothing else concatenates key strings.
 *
 * Every key of a scope is `<prefix>:{<scope>}:...`: the braces are a Redis Cluster hash
 * tag, so all of a scope's keys live in one slot and one Lua script can update a run, its
 * session, its history and the scope's counters atomically. Lua scripts receive the scope
 * base (`<prefix>:{<scope>}:`) and derive the same suffixes as below (see transitions/lib/call.lua).
 * docs/key-layout.md lists every key, its type and what it holds.
 */

import { isValidId } from './contract/ids.ts';
import { BUCKET_NAME } from './config/rate-limits.ts';

/** Ids that become part of keys: no braces or colons, so a key can never be forged. */
export { ID_PATTERN, isValidId } from './contract/ids.ts';

function checkedHash(h: string): string {
  if (!/^[0-9a-f]{64}$/.test(h)) throw new Error('invalid token digest');
  return h;
}

function checkedBucket(name: string): string {
  if (!BUCKET_NAME.test(name)) throw new Error(`invalid rate-limit bucket: ${JSON.stringify(name)}`);
  return name;
}

function checked(kind: string, id: string): string {
  if (!isValidId(id)) throw new Error(`invalid ${kind} id: ${JSON.stringify(id)}`);
  return id;
}

export interface ScopeKeys {
  /** Prefix shared by every key of the scope; passed to Lua as ARGV. */
  base: string;
  run(runId: string): string;
  events(runId: string): string;
  steps(runId: string): string;
  /** A run's pending waits (hash: waitKey -> the wait as JSON, `<waitKey>#token` -> its token's SHA-256). */
  waits(runId: string): string;
  session(sessionId: string): string;
  sessionQueue(sessionId: string): string;
  messages(sessionId: string): string;
  sessionRuns(sessionId: string): string;
  /**
   * Steering messages sent to a session (hash: message id -> the message and its outcome as
   * JSON), kept a day after the last one so a resend answers the first outcome (transitions/submit.lua).
   */
  steering(sessionId: string): string;
  /**
   * A run's steering messages not yet delivered (list of message ids, oldest first) and those
   * delivered, by boundary (hash: boundary number -> the messages taken there, JSON): transitions/steer.lua.
   */
  steerPending(runId: string): string;
  steerTaken(runId: string): string;
  /** Every re-run of a run, by creation time (zset, written by transitions/submit.lua; the run record names the newest few). */
  reruns(runId: string): string;
  /**
   * A fork into the session while its copy goes on (transitions/fork.lua, transitions/fork-copy.lua): its state
   * (hash: token, count, copied, ...) and the copy made so far (list), both expiring unless a
   * chunk renews them; the copy becomes the session's `messages` at the last chunk.
   */
  forkState(sessionId: string): string;
  forkCopy(sessionId: string): string;
  /**
   * Recall vectors of a session's committed turns (hash: runId -> float32 bytes), one hash per
   * embedding model, so vectors of two models are never compared. `space` is a hex digest.
   */
  turnVectors(sessionId: string, space: string): string;
  /** An input artifact of the scope (hash: metadata, bytes, count of unfinished runs naming it). */
  artifact(artifactId: string): string;
  /**
   * The scope's artifacts for its quota (zset: `<id> <size>` -> when to look at it again, transitions/artifact.lua),
   * and the bytes of those it holds (a counter).
   */
  artifactLedger: string;
  artifactBytes: string;
  /** Token bucket of the scope's artifact upload rate, in bytes. */
  artifactBucket: string;
  /**
   * The scope's stored bytes (transitions/lib/storage.lua, storedBytes): the ledger of what holds them (zset:
   * `<bytes> <key after base>` -> when to look at it again) and their count.
   */
  storageLedger: string;
  storedBytes: string;
  /** The scope's fork rate (hash: forks and bytes left, and when; transitions/fork.lua). */
  forkBucket: string;
  /** All runs of the scope by creation time (listing). */
  runs: string;
  /** The scope's runs in one status, by creation time (kept by setStatus in transitions/lib/status.lua). */
  runsByStatus(status: string): string;
  /** The scope's runs of one agent, by creation time (written by transitions/submit.lua). */
  runsByAgent(agent: string): string;
  /** The scope's runs on one runtime, by creation time (written by transitions/submit.lua). */
  runsByRuntime(runtime: string): string;
  /** scope counters: active (dispatched+running+retrying) */
  meta: string;
  /**
   * The concurrency keys with session heads parked for a slot, by turn (zset; the parked runs
   * are in `ready:q:<key>`, keys at their cap in `ready:capped`: transitions/lib/admission.lua).
   */
  ready: string;
  /** What an earlier version parked session heads in (a list): transitions/fill.lua admits them again. */
  legacyReady: string;
  /**
   * Runs handed out, the sweeper's outbox: a dispatched or retrying run by when its BullMQ job
   * must exist, a running run by its lease's deadline.
   */
  leases: string;
  /**
   * Deadlines the sweeper enforces (zset, score = when): `wait:<runId>` the run's earliest wait
   * timeout or sleep end, `due:<runId>` a scheduled run's start, `ttl:<runId>` a run's latest
   * start, `timeout:<runId>` the end of its timeoutMs budget.
   */
  timers: string;
  /** A resume token's record by its SHA-256 (hex): `<runId> <waitKey>`. */
  waitToken(sha256hex: string): string;
  stats(runtime: string): string;
  drain(runtime: string): string;
  held(runtime: string): string;
  /** Runs of a runtime waiting to start (queued or dispatched); score = when they began to wait. */
  waiting(runtime: string): string;
  /** Token bucket of the scope's submit rate limit. */
  submitBucket: string;
  /** Token bucket of the scope's costly reads, in bytes (src/lib/tenancy/read-budget.ts). */
  readBucket: string;
  /**
   * The scope's limits an operator set (hash: field -> number as decimal text, named as the
   * API names them: maxActive, maxActivePerKey, submitRatePerSec, submitBurst, weight,
   * maxStreams, tokensPerDay). A field absent is its configured default. Read by the
   * transitions (scopeLimits in transitions/lib/limits.lua) at each call, so a change applies without a restart.
   */
  limits: string;
  /** Stream tokens the scope minted in one minute (epoch ms / 60,000): a counter that expires after it. */
  streamTokenMints(minute: number): string;
  /**
   * The scope's model usage of one UTC day (YYYY-MM-DD), by agent and model (hash:
   * `in|out|calls:<agent>:<model>` -> count). The run's own totals are fields of its record.
   */
  usage(day: string): string;
  /** Token-budget holds of the scope's model calls in flight that day (zset: `<call>:<tokens>` -> deadline; budget-hold.lua). */
  budgetHolds(day: string): string;
  idempotency(key: string): string;
  /**
   * Live notifications of the scope's runs' new events: one message per script call, with
   * the batch of each run it wrote to (flushPublished in transitions/lib/events.lua; src/lib/streams/hub.ts).
   */
  live: string;
  /**
   * A capability token of the scope by the SHA-256 (hex) of the token: what it opens, for
   * which action, and the key that minted it; expires with the token.
   */
  capability(sha256hex: string): string;
  /** A cron schedule of the scope (hash; src/lib/schedules/schedule-store.ts). */
  schedule(scheduleId: string): string;
  /** The scope's schedules by creation time (zset), for listing. */
  schedules: string;
  /** The scope's active schedules by when a process should look at them next (zset: id -> ms). */
  schedulesDue: string;
  /** A bulk operation of the scope (hash; src/lib/engine/operations/bulk-operations.ts). */
  operation(operationId: string): string;
  /** The scope's bulk operations by creation time (zset), for listing. */
  operations: string;
  /** The scope's running bulk operations by creation time (zset): the oldest is worked on first. */
  operationsActive: string;
}

export interface Keys {
  prefix: string;
  scope(scope: string): ScopeKeys;
  /** Set of scopes that ever had a run: the sweeper's work list. */
  scopes: string;
  /** Set of scopes that ever had a schedule: the schedulers' work list. */
  scheduleScopes: string;
  /** Set of scopes with a running bulk operation: the bulk workers' work list. */
  operationScopes: string;
  /**
   * BullMQ prefix of a runtime's queues, one per agent (the queue's name is the agent's);
   * the braces keep a runtime's queues in one Cluster slot, a partition's in one of its own
   * (partition 0 is the runtime's queues as they were before partitions: `{<runtime>}`;
   * partition p, `{<runtime>:p}`, which no runtime's name can be, as ids have no colon).
   */
  queuePrefix(runtime: string, partition?: number): string;
  /** Runtime -> its queue partition count, the score (a zset, raised with ZADD GT; src/lib/engine/dispatcher.ts). */
  queuePartitions: string;
  /** Channel on which cancel requests reach whichever worker holds a run. */
  cancelChannel: string;
  /** The secret resume tokens are derived from, when WAIT_TOKEN_SECRET does not give one. */
  waitTokenSecret: string;
  /**
   * The fair share of the workers' slots (src/lib/engine/flow/fair-share.ts): `<key>` holds the
   * water level while scopes contend (JSON), `<key>:lock` the process working it out.
   */
  fairShare: string;
  /** Hash of live workers: workerId -> JSON registration. */
  workers: string;
  /** Hash of the agents a runtime's workers served: agent -> Redis time a live worker last offered it. */
  runtimeAgents(runtime: string): string;
  /** API key record by the SHA-256 (hex) of the key: {id, scope, role, createdAt}. */
  apiKeyByHash(sha256hex: string): string;
  /** API key id -> SHA-256 hex, for revoke. */
  apiKeyId(id: string): string;
  /** Set of key ids of a scope, for list. */
  apiKeysOfScope(scope: string): string;
  /** Set of the ids of operator keys (bound to no scope), for list. */
  operatorKeyIds: string;
  /** Set of every key id (does any key exist at all?). */
  apiKeyIds: string;
  /**
   * A model provider's rate-limit bucket (RATE_LIMITS; transitions/rate-bucket.lua): its sums and pause
   * (hash), and its grants of the last minute (zset: `<seq>:<tokens>:<r|s>` -> grant time). All
   * buckets share one hash tag, away from every scope's slot. Names are checked (BUCKET_NAME).
   */
  rateBucket(name: string): string;
  rateGrants(name: string): string;
  /**
   * A bucket's fair order between scopes (transitions/rate-bucket.lua): each scope's tag (zset: scope ->
   * virtual finish of its last grant), the scopes waiting (zset: scope -> tag) and when each
   * one's waiting lapses (zset: scope -> epoch ms). They live with the bucket's log.
   */
  rateTags(name: string): string;
  rateWaiting(name: string): string;
  rateLapses(name: string): string;
  /** Worker registry: runtime -> time of the newest heartbeat of any of its workers (zset). */
  runtimes: string;
  /** Worker registry: a runtime's workers, workerId -> JSON registration with its last heartbeat. */
  runtimeWorkers(runtime: string): string;
}

/**
 * Scope key builders are made on every transition; a process serves a bounded working set
 * of scopes, so they are kept (and the cache is simply dropped when it grows past this).
 */
const SCOPE_CACHE_MAX = 10_000;

export function createKeys(prefix: string): Keys {
  const scopes = new Map<string, ScopeKeys>();
  return {
    prefix,
    scopes: `${prefix}:scopes`,
    scheduleScopes: `${prefix}:schedule-scopes`,
    operationScopes: `${prefix}:operation-scopes`,
    cancelChannel: `${prefix}:cancel`,
    waitTokenSecret: `${prefix}:wait-token-secret`,
    workers: `${prefix}:workers`,
    fairShare: `${prefix}:fair-share`,
    // All key records share one hash tag so creating or revoking one is a single MULTI on Cluster.
    apiKeyByHash: (h) => `${prefix}:{${prefix}-apikeys}:h:${h}`,
    apiKeyId: (id) => `${prefix}:{${prefix}-apikeys}:id:${checked('key', id)}`,
    apiKeysOfScope: (scope) => `${prefix}:{${prefix}-apikeys}:scope:${checked('scope', scope)}`,
    apiKeyIds: `${prefix}:{${prefix}-apikeys}:ids`,
    operatorKeyIds: `${prefix}:{${prefix}-apikeys}:operators`,
    // The kind (`bucket:`, `grants:`, ...) goes before the name: a name may hold colons, and must not reach another kind's keys.
    rateBucket: (name) => `${prefix}:{${prefix}-ratelimits}:bucket:${checkedBucket(name)}`,
    rateGrants: (name) => `${prefix}:{${prefix}-ratelimits}:grants:${checkedBucket(name)}`,
    rateTags: (name) => `${prefix}:{${prefix}-ratelimits}:tags:${checkedBucket(name)}`,
    rateWaiting: (name) => `${prefix}:{${prefix}-ratelimits}:waiting:${checkedBucket(name)}`,
    rateLapses: (name) => `${prefix}:{${prefix}-ratelimits}:lapses:${checkedBucket(name)}`,
    // The registry is small and shares one hash tag, so a heartbeat is one MULTI on Cluster too.
    runtimes: `${prefix}:{${prefix}-registry}:runtimes`,
    runtimeWorkers: (rt) => `${prefix}:{${prefix}-registry}:workers:${checked('runtime', rt)}`,
    // `:agent`: the queues of earlier versions, one per runtime named after it, stay apart.
    queuePrefix: (runtime, partition = 0) => {
      if (!Number.isInteger(partition) || partition < 0) throw new Error(`invalid queue partition: ${partition}`);
      return `${prefix}:q:{${checked('runtime', runtime)}${partition === 0 ? '' : `:${partition}`}}:agent`;
    },
    queuePartitions: `${prefix}:{${prefix}-registry}:queue-partitions`,
    runtimeAgents: (rt) => `${prefix}:{${prefix}-registry}:agents:${checked('runtime', rt)}`,
    scope(scope) {
      const known = scopes.get(scope);
      if (known) return known;
      if (scopes.size >= SCOPE_CACHE_MAX) scopes.clear();
      const base = `${prefix}:{${checked('scope', scope)}}:`;
      const built: ScopeKeys = {
        base,
        run: (id) => `${base}run:${checked('run', id)}`,
        events: (id) => `${base}run:${checked('run', id)}:events`,
        steps: (id) => `${base}run:${checked('run', id)}:steps`,
        waits: (id) => `${base}run:${checked('run', id)}:waits`,
        reruns: (id) => `${base}run:${checked('run', id)}:reruns`,
        live: `${base}live`,
        session: (id) => `${base}session:${checked('session', id)}`,
        sessionQueue: (id) => `${base}session:${checked('session', id)}:queue`,
        messages: (id) => `${base}session:${checked('session', id)}:messages`,
        sessionRuns: (id) => `${base}session:${checked('session', id)}:runs`,
        steering: (id) => `${base}session:${checked('session', id)}:steering`,
        steerPending: (id) => `${base}run:${checked('run', id)}:steer-pending`,
        steerTaken: (id) => `${base}run:${checked('run', id)}:steer`,
        forkState: (id) => `${base}session:${checked('session', id)}:fork`,
        forkCopy: (id) => `${base}session:${checked('session', id)}:fork:messages`,
        turnVectors: (id, space) => `${base}session:${checked('session', id)}:vectors:${checked('vector space', space)}`,
        artifact: (id) => `${base}artifact:${checked('artifact', id)}`,
        artifactLedger: `${base}artifacts`,
        artifactBytes: `${base}artifacts:bytes`,
        artifactBucket: `${base}ratelimit:artifacts`,
        storageLedger: `${base}storage`,
        storedBytes: `${base}storage:bytes`,
        forkBucket: `${base}ratelimit:forks`,
        runs: `${base}runs`,
        runsByStatus: (status) => `${base}status:${checked('status', status)}`,
        runsByAgent: (agent) => `${base}agent:${checked('agent', agent)}:runs`,
        runsByRuntime: (rt) => `${base}runtime:${checked('runtime', rt)}:runs`,
        meta: `${base}meta`,
        ready: `${base}ready:turns`,
        legacyReady: `${base}ready`,
        leases: `${base}leases`,
        timers: `${base}timers`,
        waitToken: (h) => `${base}wait-token:${checkedHash(h)}`,
        stats: (rt) => `${base}stats:${checked('runtime', rt)}`,
        drain: (rt) => `${base}drain:${checked('runtime', rt)}`,
        held: (rt) => `${base}held:${checked('runtime', rt)}`,
        waiting: (rt) => `${base}waiting:${checked('runtime', rt)}`,
        submitBucket: `${base}ratelimit:submit`,
        readBucket: `${base}ratelimit:reads`,
        limits: `${base}limits`,
        streamTokenMints: (minute) => {
          if (!Number.isSafeInteger(minute) || minute < 0) throw new Error(`invalid minute: ${minute}`);
          return `${base}ratelimit:stream-tokens:${minute}`;
        },
        usage: (day) => {
          if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) throw new Error(`invalid usage day: ${JSON.stringify(day)}`);
          return `${base}usage:${day}`;
        },
        budgetHolds: (day) => {
          if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) throw new Error(`invalid usage day: ${JSON.stringify(day)}`);
          return `${base}usage:${day}:holds`;
        },
        // Caller-chosen idempotency keys may hold any printable text: hash-free but bounded
        // by the schema, and kept after the last colon so they cannot collide with suffixes.
        idempotency: (key) => `${base}idem:${key}`,
        capability: (hash) => `${base}cap:${checked('token hash', hash)}`,
        schedule: (id) => `${base}schedule:${checked('schedule', id)}`,
        schedules: `${base}schedules`,
        schedulesDue: `${base}schedules:due`,
        operation: (id) => `${base}operation:${checked('operation', id)}`,
        operations: `${base}operations`,
        operationsActive: `${base}operations:active`,
      };
      scopes.set(scope, built);
      return built;
    },
  };
}
