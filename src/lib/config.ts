import { z } from 'zod';
import { SCOPE_ROLES, type ScopeRole } from './contract/admin.ts';
import { parseRateLimits } from './rate-limit-config.ts';
import { parseRedisUrl } from './redis-url.ts';

/**
 * Every tunable of Baton, parsed once from the environment, frozen, and passed down.
 * Each default says why it is that value; change them with the env variable named
 * in the comment.
 */
const intMs = (def: number) => z.coerce.number().int().nonnegative().default(def);
const bool = (def: boolean) =>
  z
    .enum(['true', 'false', '1', '0'])
    .default(def ? 'true' : 'false')
    .transform((v) => v === 'true' || v === '1');

/** A model's price in USD per million tokens, each way; what MODEL_PRICES maps model ids to. */
const modelPrice = z.strictObject({
  inputPerMTokens: z.number().finite().nonnegative(),
  outputPerMTokens: z.number().finite().nonnegative(),
});
export type ModelPrice = z.infer<typeof modelPrice>;

/** An origin as browsers send it in `Origin`: scheme, host (a name or an IP, IPv6 in brackets), optional port. */
const ORIGIN = /^https?:\/\/(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(:\d{1,5})?$/;

export const configSchema = z.object({
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
   * answered (WAIT; transitions.ts lists them). 0 (default):
   * answered once the primary has it, and a failover can lose the last writes.
   */
  REDIS_MIN_REPLICAS_ACK: z.coerce.number().int().min(0).max(16).default(0),
  /**
   * REDIS_REPLICA_ACK_TIMEOUT_MS: how long such a write waits for its acknowledgements before
   * it is answered as 503 REDIS_UNAVAILABLE (a worker retries it). 2 s: replicas acknowledge in
   * about a round trip; longer means one is gone or far behind.
   */
  REDIS_REPLICA_ACK_TIMEOUT_MS: z.coerce.number().int().min(1).max(60_000).default(2_000),
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
   * LEASE_MS: how long a claim is valid without a heartbeat. 6 s with a heartbeat every 1.5 s:
   * a worker whose event loop stalls for 3 s (a long GC pause, a synchronous agent) is 4.5 s
   * from its last beat when the next one goes out, inside the lease, so it keeps its runs;
   * a worker that is gone has its runs taken over within LEASE_MS + SWEEP_INTERVAL_MS, about
   * 5 to 7 s. The price: a Redis outage longer than about 4.5 s lets leases run out, and the
   * runs are then taken over (a recovery) once Redis is back. Raise it where failovers are slower.
   */
  LEASE_MS: intMs(6_000),
  /** HEARTBEAT_MS: defaults to LEASE_MS / 4 (see LEASE_MS). */
  HEARTBEAT_MS: z.coerce.number().int().positive().optional(),
  /**
   * SWEEP_INTERVAL_MS: how often every process looks for runs whose dispatch or lease was
   * lost. 1 s adds at most a second to a recovery; a pass is three range reads per scope.
   */
  SWEEP_INTERVAL_MS: intMs(1_000),
  /** DISPATCH_GRACE_MS: a dispatched run with no BullMQ job after this long is re-dispatched. */
  DISPATCH_GRACE_MS: intMs(10_000),
  /**
   * AGENT_GRACE_MS: a run waits this long for a live worker of its runtime that serves its
   * agent (counted from its submit, or from when such a worker was last seen), then fails
   * UNKNOWN_AGENT. 10 minutes covers a rolling deploy that adds an agent to some workers, or
   * replaces every worker of a runtime, with room to spare.
   */
  AGENT_GRACE_MS: intMs(600_000),
  /**
   * UNKNOWN_AGENT_SUBMIT: a submit for an agent that no worker of its runtime offered in the
   * last day, while workers of that runtime were seen in that day (the typo: `"agent": "helo"`),
   * is `refuse`d at once with 422 UNKNOWN_AGENT naming the agents the runtime has, or
   * `queue`d with a warning to wait for AGENT_GRACE_MS as any unserved run. `refuse` by
   * default: a client (a chat page) learns of the typo in its answer instead of ten minutes
   * later. A deployment that submits agents before any worker offers them (agents rolled out
   * after their callers) sets `queue`, or its callers send `awaitAgent: true`. A runtime no
   * worker was seen in for a day accepts every agent either way (workers started after the API).
   */
  UNKNOWN_AGENT_SUBMIT: z.enum(['refuse', 'queue']).default('refuse'),
  /** MAX_ATTEMPTS: default attempts per run (an agent or a submit may override). */
  MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(3),
  /**
   * MAX_RECOVERIES: takeovers of a run whose worker was lost (its lease ran out: a crash, a
   * kill, a pause); one more fails it with RECOVERY_LIMIT. Hand-overs at a graceful shutdown
   * do not count. 5: losing a worker is rare in a healthy pool, so five takeovers of one run
   * are far past bad luck and say the run itself kills its workers; yet a crash takes every
   * run of that worker down with it, and five leaves an innocent run room to have shared a
   * few workers with a crashing one. A poison run thus costs at most six dead worker processes
   * and about six times LEASE_MS + SWEEP_INTERVAL_MS (two minutes by default) of recovering.
   */
  MAX_RECOVERIES: z.coerce.number().int().min(0).max(1000).default(5),
  /**
   * MAX_RUN_MS: how long workers may hold one run in all, summed over its attempts and
   * takeovers (time queued, retrying, blocked or waiting holds no worker and is not counted);
   * then its signal aborts and it fails with RUN_TIMEOUT, its streamed text kept as an
   * incomplete answer. 1 h: an agent turn is seconds to minutes, a long tool loop tens of
   * minutes; an hour is beyond any of them, and it bounds how long a stuck or looping agent
   * keeps a worker slot and its scope's slot from everyone else. At most 2^31 - 1 (a timer's limit).
   */
  MAX_RUN_MS: z.coerce.number().int().min(1000).max(2_147_483_647).default(3_600_000),
  /** RETRY_BASE_MS / RETRY_MAX_MS: exponential backoff with full jitter, capped. */
  RETRY_BASE_MS: intMs(1_000),
  RETRY_MAX_MS: intMs(60_000),
  /**
   * MAX_ACTIVE_PER_SCOPE: runs of one scope dispatched or running at once, the default of a
   * scope's `maxActive` limit (an operator sets a scope's own: PUT /v1/scopes/{scope}/limits).
   */
  MAX_ACTIVE_PER_SCOPE: z.coerce.number().int().min(1).max(100_000).default(8),
  /**
   * MAX_ACTIVE_PER_KEY: runs of one concurrency key (a submit's concurrencyKey) dispatched or
   * running at once, the default of a scope's `maxActivePerKey`; 0: no cap per key (the keys of
   * a scope still take turns for its slots).
   */
  MAX_ACTIVE_PER_KEY: z.coerce.number().int().min(0).max(100_000).default(0),
  /**
   * SCOPE_WEIGHT: the default of a scope's `weight`, its share of the workers' slots against
   * the other scopes' while they contend for them (src/lib/engine/fair-share.ts), and of each
   * provider rate-limit bucket's grants while they wait for it (lua/rate-bucket.lua).
   */
  SCOPE_WEIGHT: z.coerce.number().int().min(1).max(1000).default(1),
  /**
   * TOKENS_PER_DAY: model tokens (input and output) one scope may use in a UTC day, the default
   * of a scope's `tokensPerDay` limit; 0: no budget. 0, because a budget is a decision about one
   * customer's spend: an operator sets it per scope (PUT /v1/scopes/{scope}/limits).
   */
  TOKENS_PER_DAY: z.coerce.number().int().min(0).max(1_000_000_000_000).default(0),
  /**
   * TOKENS_UNESTIMATED: what a model call that gives no estimate (`ctx.infer` without
   * `estimatedTokens`) holds of its scope's daily budget while it is made (at most what is
   * left). 4096: what a call of the built-in `chat` agent may answer (CHAT_MAX_TOKENS), a
   * generous size for one model call; a call that uses more than it held is what a budget can
   * overshoot by (docs/tenancy.md#token-budgets), so agents that know better give an estimate.
   */
  TOKENS_UNESTIMATED: z.coerce.number().int().min(0).max(1_000_000_000).default(4096),
  /**
   * PRIORITY_STEP_MS: what one level of a submit's priority (0-9) is worth in waiting time. A
   * parked run goes before those of its key that became due less than this many ms per level
   * of difference after it, so a run is never passed by one that became due more than
   * (9 - its priority) steps after it: nine minutes at the default, for priority 0.
   */
  PRIORITY_STEP_MS: z.coerce.number().int().min(1).max(86_400_000).default(60_000),
  /**
   * FAIR_SHARE_INTERVAL_MS: how often the scopes' fair shares of the workers' slots are worked
   * out again (by one process at a time); 0: no sharing, each scope runs up to its maxActive.
   */
  FAIR_SHARE_INTERVAL_MS: z.coerce.number().int().min(0).max(3_600_000).default(1_000),
  /**
   * HISTORY_READ_MAX: the newest messages of a session the built-in store hands an agent
   * whose memory has no `window.maxMessages` (a window of maxMessages reads that many; recall
   * reads the whole list, since it scores every turn). 200: a hundred turns is more than a
   * model's context holds for most agents, and it keeps a run's claim the same cost in a
   * session of ten turns or ten thousand. The whole history stays stored and readable through
   * GET .../messages.
   */
  HISTORY_READ_MAX: z.coerce.number().int().min(1).max(100_000).default(200),
  /**
   * HISTORY_READ_MAX_BYTES: the most bytes of history (messages as stored, JSON) a claim hands
   * an agent of the built-in store: the newest messages that fit, so a session of huge turns
   * costs a claim this much at most, not the whole list. 8 MiB: about twice the text a model
   * with a million-token context can take, so no agent's memory policy misses what it could use.
   */
  HISTORY_READ_MAX_BYTES: z.coerce.number().int().min(1024).max(512 * 1024 * 1024).default(8 * 1024 * 1024),
  /**
   * HISTORY_MAX_BYTES: the most a session's stored history may take (the Redis memory of its
   * list, MEMORY USAGE); a submit whose message would pass it is refused with 409
   * SESSION_HISTORY_FULL (the session is full: start a new one). 64 MiB: a long chat of 4,000
   * turns of 16 KiB each (questions, answers and tool output) fits, while what one session of
   * a tenant can hold in Redis stays bounded.
   */
  HISTORY_MAX_BYTES: z.coerce.number().int().min(1024).max(4 * 1024 * 1024 * 1024).default(64 * 1024 * 1024),
  /**
   * PAGE_MAX_BYTES: the most bytes one page of a listing carries (a session's messages, runs,
   * a run's steps, usage rows), besides its count limit; a page that stops on bytes has a
   * nextCursor though it holds fewer than `limit` items, and an item larger than this comes
   * alone on its page. 4 MiB: a chat screen's page of a session (a hundred ordinary turns, or
   * a dozen very long ones) in one request, and what one request can make an API process hold.
   */
  PAGE_MAX_BYTES: z.coerce.number().int().min(1024).max(512 * 1024 * 1024).default(4 * 1024 * 1024),
  /**
   * READ_FREE_BYTES / READ_BYTES_PER_SEC / READ_BURST_BYTES: the per-scope budget of costly reads
   * (a session's history pages and the listings; src/lib/tenancy/read-budget.ts): each answer's
   * bytes past READ_FREE_BYTES are taken from a token bucket of bytes in Redis, shared by every
   * API process, and while it is in debt the scope's costly reads are 429 READ_RATE_LIMITED.
   * Sized for a backend relaying hundreds of chats with one key, each opening a chat page that
   * reads a page of its history: 256 KiB free is 50 to 100 messages of a few KB, so such a page
   * is never charged; 1 MiB/s is a long session's full 4 MiB page every four seconds on top,
   * the 16 MiB burst four such pages at once, and the largest session (HISTORY_MAX_BYTES) is
   * read whole in under a minute. Four readers paging a 21 MB session took 17 MB/s, and another
   * scope's whoami p50 from 5 ms to 160 ms; with 2 MiB/s and a 64 MiB burst an 8-second attack
   * still read 65 MB (the burst), and the other scope's whoami p50 was 200 times its own
   * (`npm run bench`, hostile section, on a loaded 2-core machine).
   * READ_BYTES_PER_SEC 0 turns it off; the defaults of a scope's `readBytesPerSec` and
   * `readBurstBytes` limits (an operator sets a scope's own: PUT /v1/scopes/{scope}/limits).
   */
  READ_FREE_BYTES: z.coerce.number().int().min(0).max(512 * 1024 * 1024).default(256 * 1024),
  READ_BYTES_PER_SEC: z.coerce.number().int().min(0).max(1024 ** 4).default(1024 * 1024),
  READ_BURST_BYTES: z.coerce.number().int().min(1).max(1024 ** 4).default(16 * 1024 * 1024),
  /**
   * RETENTION_MS: how long a finished run, its steps and its event log stay readable, the
   * default of a scope's `retentionMs` (an operator sets a scope's own; it applies to runs that
   * end after the change). 24 h: a client that lost its connection reads the answer and its
   * events the next day; a finished run's input counts in its scope's stored bytes that long.
   * Also how long an unused artifact and a used resume token's record stay.
   */
  RETENTION_MS: intMs(24 * 3600_000),
  /** EVENTS_MAX_LEN: cap of one run's event stream (token deltas are coalesced, so this is ample). */
  EVENTS_MAX_LEN: z.coerce.number().int().min(100).default(50_000),
  /**
   * EMIT_FLUSH_MS / EMIT_FLUSH_TOKENS: token writes of a run start at most once per 5 ms
   * (sooner after 64 queued tokens): at most 200 round trips per second per run, however fast
   * the model. The window is leading-edge, so a token after 5 ms of quiet (a model streaming
   * a token every 10 ms or slower) goes out at once, about 1 ms from emit to a reader, and a
   * faster stream waits 2.5 ms on average. 15 ms cost a 10 ms stream 5 to 10 ms per token.
   */
  EMIT_FLUSH_MS: intMs(5),
  EMIT_FLUSH_TOKENS: z.coerce.number().int().min(1).default(64),
  /** SHUTDOWN_GRACE_MS: on SIGTERM, in-flight runs get this long before their leases are handed over. */
  SHUTDOWN_GRACE_MS: intMs(10_000),
  /**
   * HTTP_HEADERS_TIMEOUT_MS: a client must have sent its request headers within this long of
   * connecting (Node answers 408 and closes). 10 s: headers are a few hundred bytes, sent at
   * once by any client; Node's 60 s lets one slow-header client hold a socket six times as long.
   */
  HTTP_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(10_000),
  /**
   * HTTP_REQUEST_TIMEOUT_MS: the whole request, headers and body, must have arrived within
   * this long (Node answers 408 and closes). 120 s: the largest body, an ARTIFACT_MAX_BYTES
   * upload (10 MiB), arrives within it at 1 Mbit/s; Node's 300 s is five minutes of a socket
   * for a client that trickles. Event streams are not affected (their request has no body).
   */
  HTTP_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).max(3_600_000).default(120_000),
  /**
   * BODY_MIN_BYTES_PER_SEC: a request body must keep arriving at this average rate, counted
   * from its headers with the first two seconds free, or it is refused with 408 and its
   * connection closed: a client sending a byte now and then cannot hold a socket for the whole
   * request timeout. 16 KiB/s is a slow mobile uplink; a JSON body up to BODY_LIMIT_BYTES
   * mostly arrives in one packet anyway. 0 turns the check off.
   */
  BODY_MIN_BYTES_PER_SEC: z.coerce.number().int().min(0).max(1_000_000_000).default(16 * 1024),
  /** BODY_LIMIT_BYTES: largest accepted JSON body. */
  BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).default(1024 * 1024),
  /**
   * BODY_MAX_DEPTH: deepest nesting of arrays and objects in a JSON body (400 beyond), checked
   * on the bytes before they are parsed. 128: twice what an outputSchema may nest (64), room
   * for caller memory and metadata trees, and far below the thousands of levels at which
   * recursive code on the way (JSON.stringify, zod, Lua's cjson) runs out of stack.
   */
  BODY_MAX_DEPTH: z.coerce.number().int().min(8).max(1000).default(128),
  /**
   * ARTIFACT_MAX_BYTES: largest input artifact upload (413 beyond). 10 MiB holds a photo, a
   * PDF of a few dozen pages or a large source file, what a turn of a conversation attaches;
   * the Redis store keeps the bytes in one value and the worker holds an inline artifact in
   * memory, so the bound is also what one attachment may cost them. At most 512 MiB, the
   * largest value Redis stores.
   */
  ARTIFACT_MAX_BYTES: z.coerce.number().int().min(1).max(512 * 1024 * 1024).default(10 * 1024 * 1024),
  /**
   * ARTIFACT_SCOPE_MAX_BYTES: bytes of input artifacts one scope may hold in the Redis store
   * at once (429 ARTIFACT_QUOTA_EXCEEDED beyond, Retry-After when its oldest may expire).
   * A backend relaying a few hundred chats with one key, each attaching a file or two a day
   * (screenshots, PDFs: mostly a few hundred KB), holds 100 to 300 MiB over the RETENTION_MS
   * an upload lives; 256 MiB fits that, and caps what one tenant adds to a Redis every tenant
   * shares (30 uploads of 10 MiB added 359 MiB, for a day). 0 turns it off.
   */
  ARTIFACT_SCOPE_MAX_BYTES: z.coerce.number().int().min(0).max(1024 ** 4).default(256 * 1024 * 1024),
  /**
   * ARTIFACT_UPLOAD_BYTES_PER_SEC / ARTIFACT_UPLOAD_BURST_BYTES: per-scope token bucket of
   * uploaded bytes (429 ARTIFACT_RATE_LIMITED with Retry-After beyond it). A few hundred chats
   * attaching a file every few minutes between them upload well under 1 MiB/s; a burst of
   * 64 MiB lets several of their users attach the largest files at once, while a script
   * cannot write Redis (and its replicas) at network speed. The burst is at least
   * ARTIFACT_MAX_BYTES, so every upload the size limit admits can pass. 0 turns the rate off.
   */
  ARTIFACT_UPLOAD_BYTES_PER_SEC: z.coerce.number().int().min(0).max(1024 ** 4).default(1024 * 1024),
  ARTIFACT_UPLOAD_BURST_BYTES: z.coerce.number().int().min(1).max(1024 ** 4).default(64 * 1024 * 1024),
  /**
   * ARTIFACT_INLINE_MAX_BYTES: bytes of the inline artifacts (disposition `inline`, the
   * default) one submit may attach (413 INLINE_ARTIFACTS_TOO_LARGE beyond): a worker holds
   * them all in memory while the run lasts. 20 MiB holds two of the largest uploads or a
   * dozen photos, what one turn of a chat attaches; a worker then holds at most
   * WORKER_CONCURRENCY × 20 MiB of them (320 MiB by default), where 8 runs inlining
   * 16 × 10 MiB each took a process from 182 to 740 MiB. Larger sets go by reference.
   */
  ARTIFACT_INLINE_MAX_BYTES: z.coerce.number().int().min(1).max(1024 ** 4).default(20 * 1024 * 1024),
  /**
   * SUBMIT_RATE_PER_SEC / SUBMIT_BURST: per-scope token bucket for submits (429 with Retry-After
   * beyond it). 20/s sustained with bursts of 100 is far above what a tenant's users type, and
   * low enough that one tenant's runaway script cannot flood Redis for everyone. 0 turns it off.
   * The defaults of a scope's `submitRatePerSec` and `submitBurst` limits (an operator sets a
   * scope's own: PUT /v1/scopes/{scope}/limits).
   */
  SUBMIT_RATE_PER_SEC: z.coerce.number().min(0).max(1_000_000).default(20),
  SUBMIT_BURST: z.coerce.number().int().min(1).max(1_000_000).default(100),
  /**
   * SCHEDULED_MAX_PER_SCOPE: runs of one scope scheduled (runAt or delayMs) and not yet due;
   * a submit of one more is 429 TOO_MANY_SCHEDULED_RUNS, with no Retry-After (a place frees
   * when one comes due or is cancelled, on the tenant's own schedule). A backend relaying a
   * few hundred chats schedules a follow-up or a reminder or two per chat: hundreds. 1,000
   * fits that, where the submit rate alone admitted about 1.7 million a day, each record kept
   * until it is due (up to a year ahead).
   */
  SCHEDULED_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(10_000_000).default(1_000),
  /**
   * MAX_QUEUED_RUNS_PER_SCOPE: runs of one scope accepted and not started (queued, or handed to
   * a worker's queue and not claimed: both `queued` to the API), the default of a scope's
   * `maxQueuedRuns`; a submit of one more is 429 QUEUED_RUNS_LIMIT. A backend relaying a few
   * hundred chats with one key has a run per chat and at times one typed behind it, and at
   * its pace of about ten runs a second it piles up some 1,800 while no worker takes any for
   * three minutes (a deploy); 2,000 fits that, where 87 schedules with 256 KiB inputs piled up
   * 3,853 in three minutes. Scheduled runs have their own cap; waiting and blocked runs started
   * and hold no worker. 0: none.
   */
  MAX_QUEUED_RUNS_PER_SCOPE: z.coerce.number().int().min(0).max(10_000_000).default(2_000),
  /**
   * STORAGE_MAX_BYTES_PER_SCOPE: bytes of its own input one scope may keep in Redis, the
   * default of a scope's `maxStoredBytes`: each run's record as its submit wrote it (input,
   * memory, metadata, schema and the record's own fields), counted until the record expires
   * (its retention after the run ends), and each fork's copy of a history, for as long as the
   * fork is kept. A submit or a fork that would pass it is 429 STORAGE_LIMIT. Those chats'
   * messages are a few KB: about 4 KB a run with its record, and some 200 turns a chat a day
   * make 60,000 runs, 240 MiB within the 24 h they are kept; 256 MiB fits that (the same as
   * the artifacts' quota), where 256 KiB inputs added 820 MB in three minutes. 0: none.
   */
  STORAGE_MAX_BYTES_PER_SCOPE: z.coerce.number().int().min(0).max(1024 ** 4).default(256 * 1024 * 1024),
  /**
   * FORKS_PER_MINUTE / FORK_BYTES_PER_MINUTE: forks of sessions one scope may make a minute,
   * and bytes of history they may copy (each refilled over the minute; a fork larger than the
   * bytes left passes while any are left and the next waits for the debt), the defaults of a
   * scope's `forksPerMinute` and `forkBytesPerMinute`; beyond, 429 FORK_RATE_LIMITED with
   * Retry-After. A chat product forks when a user edits an earlier message: a few a minute
   * across hundreds of chats, each a prefix of ordinary turns (KBs to a few MB). 60 a minute
   * and 64 MiB (HISTORY_MAX_BYTES: the largest session, once a minute) fit that, where ten forks
   * of a 21 MB session in a row added 226 MB. 0: none.
   */
  FORKS_PER_MINUTE: z.coerce.number().int().min(0).max(1_000_000).default(60),
  FORK_BYTES_PER_MINUTE: z.coerce.number().int().min(0).max(1024 ** 4).default(64 * 1024 * 1024),
  /**
   * SCHEDULES_MAX_PER_SCOPE: cron schedules one scope may hold (POST …/schedules; one more is
   * 429 TOO_MANY_SCHEDULES). Every active schedule is an entry each process's scheduler looks
   * at when due, and a schedule firing every second is a run a second; 100 covers a tenant's
   * reports, digests and periodic agents while bounding what one scope can set going.
   */
  SCHEDULES_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(100_000).default(100),
  /**
   * SCHEDULE_TEMPLATE_MAX_BYTES: the most bytes one schedule's run template (its input,
   * metadata, session, agent and runtime, as JSON) may take; a larger one is refused at create
   * with 413 SCHEDULE_TEMPLATE_TOO_LARGE. A scheduled run's input is a prompt or instructions
   * document (a report's brief, a digest's rules): a long one is a few KiB. 64 KiB holds a
   * 48 KiB prompt (about 12,000 tokens) beside the 16 KiB of metadata a submit may carry, so
   * ordinary use never meets it, while a scope's 100 schedules hold at most 6.4 MiB of
   * templates, where a submit's 256 Ki-character input let them hold over 25 MiB.
   */
  SCHEDULE_TEMPLATE_MAX_BYTES: z.coerce.number().int().min(1024).max(16 * 1024 * 1024).default(64 * 1024),
  /**
   * BULK_RUNS_PER_SECOND: runs one scope's bulk operation (cancel or re-run by filter) acts on
   * per second, whatever the number of processes. A cancel is one script of a few commands; 500
   * a second is a small share of one Redis core, so other scopes' submits and claims keep their
   * pace, and 2,000 runs take about four seconds.
   */
  BULK_RUNS_PER_SECOND: z.coerce.number().int().min(1).max(100_000).default(500),
  /**
   * BULK_OPERATIONS_MAX_PER_SCOPE: bulk operations one scope may have running (one more is 429
   * TOO_MANY_OPERATIONS). A scope's operations run one after the other, oldest first.
   */
  BULK_OPERATIONS_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(1_000).default(5),
  /** BULK_POLL_MS: how often every process looks for bulk operations to advance (0: this process advances none). */
  BULK_POLL_MS: intMs(200),
  /**
   * SCHEDULE_POLL_MS: how often every process looks for schedules whose tick is due (0: this
   * process fires none). A tick's run is made within about this long of its time; any process
   * may fire it, and the tick's idempotency key makes it one run however many try.
   */
  SCHEDULE_POLL_MS: intMs(200),
  /**
   * SCHEDULE_MISSED_AFTER_MS: a schedule's tick found later than this after its time was
   * missed (every process or Redis was down), and the schedule's `missed` policy decides about
   * it (skip, or catchUpOne); one found sooner fires, late. Longer than a busy moment's delay,
   * shorter than an outage worth calling one.
   */
  SCHEDULE_MISSED_AFTER_MS: intMs(5_000),
  /**
   * WAIT_TOKEN_SECRET: the key resume tokens (POST /v1/waits/{token}) are derived from, the
   * same in every process. Redis stores only each token's SHA-256. Unset: a secret is made at
   * the first start and kept in Redis, so anyone who can read Redis could derive tokens (as
   * they could resume waits by writing Redis); set it to keep the secret out of Redis.
   * Changing it voids the tokens of pending waits (their waits can still be resumed with a key).
   */
  WAIT_TOKEN_SECRET: z.string().min(32, 'at least 32 characters').optional(),
  /**
   * MAX_WAITS_PER_RUN: waits (inputs, approvals, sleeps) one run may have pending at once; the
   * ctx.waitFor (or approval, or sleep) that would pass it fails the run with TOO_MANY_WAITS.
   * Real agents wait on one to a few at a time (an approval per parallel tool call of a model
   * turn, a question to each of a handful of people); 100 leaves ample room for that, and
   * bounds what every park of the run writes and every resume reads again.
   */
  MAX_WAITS_PER_RUN: z.coerce.number().int().min(1).max(10_000).default(100),
  /**
   * SCHEMA_CHECKS_PER_SCOPE: tenant schema checks of one scope that may wait for the schema
   * thread in one process (an outputSchema at submit, a resume's value against its wait's
   * schema, by key or by token); beyond it, 429 SCHEMA_CHECKS_BUSY. 32: a burst of submits
   * with schemas fits, and a flood waits behind its own scope, bounded in memory.
   */
  SCHEMA_CHECKS_PER_SCOPE: z.coerce.number().int().min(1).max(10_000).default(32),
  /** SSE_KEEPALIVE_MS: comment line sent on idle SSE connections so proxies keep them open. */
  SSE_KEEPALIVE_MS: intMs(15_000),
  /**
   * SSE_RETRY_MS: the `retry:` hint, how long an EventSource waits before it reconnects with
   * Last-Event-ID. 1 s: a dropped stream resumes quickly without hammering a restarting API.
   */
  SSE_RETRY_MS: z.coerce.number().int().min(100).default(1_000),
  /** SSE_MAX_BUFFER_BYTES: a client this far behind is disconnected (it resumes with Last-Event-ID). */
  SSE_MAX_BUFFER_BYTES: z.coerce.number().int().min(1024).default(4 * 1024 * 1024),
  /**
   * SSE_STALL_MS: a reader that takes no byte for this long while bytes wait for it is
   * disconnected and its buffers freed (it resumes with Last-Event-ID). A connected client's
   * TCP stack takes bytes within milliseconds even while its application is busy; 30 s, two
   * keep-alive periods, is past any pause but a reader that stopped reading or lost its network.
   */
  SSE_STALL_MS: z.coerce.number().int().min(100).default(30_000),
  /**
   * SSE_MAX_PER_KEY / SSE_MAX_PER_TOKEN / SSE_MAX_PER_SCOPE / SSE_MAX_PER_PROCESS: event
   * streams one API key (its own and those opened with the stream tokens it minted), one
   * stream token, one scope (all its keys), and all scopes together may hold open in one API
   * process (429 TOO_MANY_STREAMS beyond, Retry-After SSE_STALL_MS). SSE_MAX_PER_SCOPE is the
   * default of a scope's `maxStreams` limit, which an operator may set per scope.
   * Sized from a backend that relays its users' chats through one key and keeps a stream open
   * per chat it relays: hundreds to a thousand at once (before, 64 per key refused one relaying
   * 200). 2,000 per key admits 1,000 with room for as many again while a proxy's restart
   * reconnects them all (a reader's old connection counts until its close is seen). A page
   * streams a run or a few: 8 per token. 4,000 per scope is two such keys' worth, so a key at
   * its cap leaves half of its scope's streams to its other keys and their pages. 10,000 per
   * process is the memory budget across scopes: an open stream holds 21 KB of the API's
   * memory when its reader reads (1,000 readers of one run held 20.6 MB after a full GC,
   * test/stream-readers.test.ts); while stalled, until SSE_STALL_MS cuts it, it holds the
   * slice its socket did not take besides: 42 to 71 KB in all with events of a few KB (300
   * readers that never read a 5 MB log, test/stream-limits.test.ts), 99 to 125 KB with 64 KiB
   * token events (200 readers of a 6 MB log, test/stream-stalled-memory.test.ts). 210 MB while
   * they read, up to 0.7 and 1.25 GB while they all stall, whatever number of scopes opened them (the kernel's
   * socket buffers of each connection come on top: docs/streams.md).
   */
  SSE_MAX_PER_KEY: z.coerce.number().int().min(1).max(1_000_000).default(2_000),
  SSE_MAX_PER_TOKEN: z.coerce.number().int().min(1).max(1_000_000).default(8),
  SSE_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(1_000_000).default(4_000),
  SSE_MAX_PER_PROCESS: z.coerce.number().int().min(1).max(10_000_000).default(10_000),
  /**
   * METRICS_TOKEN: when set, /metrics (the API's and a worker's) answers only requests with
   * `Authorization: Bearer <token>` (401 otherwise), for deployments whose metrics port is
   * reachable by more than the scraper. 16+ printable characters. Unset: open, as Prometheus
   * expects by default; /healthz and /readyz stay open either way.
   */
  METRICS_TOKEN: z.string().regex(/^[\x21-\x7e]{16,256}$/, '16-256 printable characters, no spaces').optional(),
  /**
   * STREAM_TOKEN_TTL_MS: how long a stream token (a browser page's read-only pass to one run's
   * or session's events) opens new connections. 15 min covers a page that opens its stream and
   * rides out the reconnects of a long answer; a token copied out of a URL (browser history, a
   * proxy's access log) is worthless soon after. It is checked when a connection opens: an open
   * stream is not cut at expiry, and a page reconnecting later asks its backend for a new one.
   * At most 24 h, because a token travels in URLs.
   */
  STREAM_TOKEN_TTL_MS: z.coerce.number().int().min(1_000).max(24 * 3600_000).default(15 * 60_000),
  /**
   * STREAM_TOKEN_MINT_PER_MIN: stream tokens one scope may mint per minute on the
   * …/stream-token routes (429 STREAM_TOKEN_RATE_LIMITED beyond, Retry-After the rest of the
   * minute). A page asks for a token per answer it shows, or one per session, so a backend
   * relaying a few hundred chats mints a few hundred a minute at its busiest; 600 is twice
   * that, and bounds the token records a scope keeps alive (each for STREAM_TOKEN_TTL_MS) to
   * about 9,000, where 20,000 were minted in 13 s. A submit's `streamToken: true` is bounded
   * by the submit rate instead. 0 turns it off.
   */
  STREAM_TOKEN_MINT_PER_MIN: z.coerce.number().int().min(0).max(1_000_000).default(600),
  /**
   * CORS_ORIGINS: origins (`https://app.example.com`, comma separated) whose pages may read the
   * routes a stream token opens, and call the chat routes (docs/chat-pages.md). Empty: no
   * cross-origin page may, which is right until a deployment names its own front end; `*` is not
   * offered, since a token page is always a known site of the tenant.
   */
  CORS_ORIGINS: z
    .string()
    .default('')
    .transform((s) => s.split(',').map((o) => o.trim().toLowerCase()).filter(Boolean))
    .pipe(z.array(z.string().regex(ORIGIN, 'each entry must be an origin: scheme://host[:port], no path'))),
  /** METRICS_SCOPE_LABEL: add the scope label to run metrics (unbounded cardinality, opt in). */
  METRICS_SCOPE_LABEL: bool(false),
  /**
   * METRICS_LABEL_LIMIT: distinct runtime and agent label values one process exports; later
   * ones are folded into "_other". 100: far more pools and agents than a deployment runs,
   * yet a client submitting made-up names cannot grow Prometheus without bound.
   */
  METRICS_LABEL_LIMIT: z.coerce.number().int().min(1).max(10_000).default(100),
  /**
   * USAGE_ROWS_PER_DAY: distinct agent × model rows one scope's usage may add in a UTC day,
   * and distinct models one run's usage keeps; calls past it are counted in one catch-all
   * row (agent and model `_other`), never dropped, so every total stays exact. A deployment
   * runs tens of agents over a handful of models, tens of rows a day; 200 is several times
   * that, where one run reporting made-up model names added 5,004.
   */
  USAGE_ROWS_PER_DAY: z.coerce.number().int().min(1).max(100_000).default(200),
  /**
   * BATON_BOOTSTRAP_KEYS: API keys declared at start, `scope:role:key` separated by commas
   * (for compose files and tests). Keys made with `baton keys create` need no restart.
   */
  BATON_BOOTSTRAP_KEYS: z.string().optional(),
  /**
   * Built-in `chat` agent: any OpenAI-compatible endpoint. OPENAI_BASE_URL unset = the OpenAI
   * API; OPENAI_API_KEY may stay unset for a local server that needs none (the agent fails
   * with CHAT_NOT_CONFIGURED when both are unset). Read by the worker when `chat` first runs.
   */
  OPENAI_BASE_URL: z.string().url().optional(),
  OPENAI_API_KEY: z.string().optional(),
  /** OPENAI_MODEL: gpt-4o-mini, a cheap, fast model that streams: the right default for trying Baton out. */
  OPENAI_MODEL: z.string().default('gpt-4o-mini'),
  /**
   * CHAT_MAX_TOKENS: the most tokens one answer of the built-in `chat` agent may take (its
   * `max_completion_tokens`). A call's estimate for the scope's token budget and its provider
   * bucket's reservation is its prompt plus this, so both hold what the call can use; without
   * it one call on a 1,000-token budget used 16,035. 4096: about 3,000 words, more than a chat
   * answer takes, and within the output limit of the models an OpenAI-compatible endpoint
   * commonly serves (a value past a model's own limit is refused by the provider).
   */
  CHAT_MAX_TOKENS: z.coerce.number().int().min(1).max(1_000_000).default(4096),
  /**
   * OPENAI_COMPAT_MODELS: upstream model names the OpenAI-compatible API (/v1/responses,
   * /v1/chat/completions) accepts as `model`, each mapped to the agent that runs it:
   * `gpt-4o-mini=chat,gpt-4o=chat` (a name alone maps to the built-in `chat`, which calls
   * OPENAI_MODEL on its endpoint whatever the name). Any other `model` is an agent's name,
   * refused as model_not_found when no worker of RUNTIME offers it. Unset: none, so a client
   * names agents, and an upstream name a deployment did not list is refused.
   */
  OPENAI_COMPAT_MODELS: z
    .string()
    .default('')
    .transform((s, ctx) => {
      const map: Record<string, string> = {};
      for (const entry of s.split(',').map((e) => e.trim()).filter(Boolean)) {
        const [name, agent = 'chat', extra] = entry.split('=').map((p) => p.trim());
        if (extra !== undefined || !/^[\x21-\x7e]{1,128}$/.test(name) || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(agent)) {
          ctx.addIssue({ code: 'custom', message: `"${entry}" is not <model name>[=<agent>]` });
          return z.NEVER;
        }
        map[name] = agent;
      }
      return map;
    }),
  /**
   * MODEL_PRICES: what each model costs, as JSON: `{"gpt-4o-mini": {"inputPerMTokens": 0.15,
   * "outputPerMTokens": 0.6}}`, USD per million tokens, model ids as the agents report them.
   * A run's cost is its usage priced by this table (GET …/runs/{runId}/usage, the inspector),
   * shown only when every model the run called has a price. Unset: no costs, only tokens.
   */
  MODEL_PRICES: z
    .string()
    .transform((s, ctx) => {
      try {
        return JSON.parse(s) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'must be JSON: {"<model>": {"inputPerMTokens": <USD>, "outputPerMTokens": <USD>}, …}' });
        return z.NEVER;
      }
    })
    .pipe(z.record(z.string().min(1).max(200), modelPrice, {
      // 200: the longest model id Baton counts (a longer one is cut, and would never match).
      error: (issue) => (issue.code === 'invalid_key' ? 'model ids are 1 to 200 characters' : 'must be a JSON object of model ids to prices'),
    }))
    .optional(),
  /**
   * RATE_LIMITS: model providers' rate limits, shared by every worker: buckets separated by
   * `;`, each `<bucket>=rpm:<n>,tpm:<n>` (either or both), e.g.
   * `openai:gpt-4o-mini=rpm:500,tpm:200000`, and optionally `burst:<n>` (RATE_LIMIT_BURST for
   * that bucket). A provider then sees at most rpm requests and tpm tokens in any 60 s window,
   * spread over the minute (docs/rate-limits.md). Unset: no buckets. Every process must be
   * given the same buckets (the limits travel with each call, not with the bucket).
   */
  RATE_LIMITS: z
    .string()
    .default('')
    .transform((s, ctx) => {
      try {
        return parseRateLimits(s);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
        return z.NEVER;
      }
    }),
  /**
   * RATE_LIMIT_BURST: how many seconds' share of its minute a bucket grants in any one second,
   * for buckets whose RATE_LIMITS entry sets no `burst`: at most ceil(rpm / 60) × this requests
   * and ceil(tpm / 60) × this tokens a second. 1, because OpenAI documents its per-minute limits
   * as enforced over shorter periods (60,000 requests a minute as 1,000 a second) and answers a
   * burst within the minute's limit with 429; Anthropic refills its limits continuously (a
   * token bucket), which a second's share also keeps within. 60: no spread (the whole minute at once).
   */
  RATE_LIMIT_BURST: z.coerce.number().int().min(1).max(60).default(1),
  /**
   * RATE_LIMIT_PAUSE_MAX_MS: the longest a provider's 429 may pause a bucket (its Retry-After is
   * cut to this). 5 minutes: five of the minutes a provider's rpm and tpm are counted over, far
   * past any Retry-After a minute's limit gives, while a longer pause stops every scope's calls
   * on the word of one answer (a day's quota, a broken or hostile upstream: 86,400 s paused the
   * shared bucket for a day). After the cap the calls ask the provider again and the first 429
   * pauses the bucket again: at most a second's share of calls per cap. An operator's pause is
   * not capped by it.
   */
  RATE_LIMIT_PAUSE_MAX_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(300_000),
});

export type Config = Readonly<
  Omit<z.infer<typeof configSchema>, 'HEARTBEAT_MS'> & { HEARTBEAT_MS: number }
>;

export class ConfigError extends Error {}

/** Parses the environment; throws a ConfigError naming each invalid variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(configSchema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') picked[key] = v;
  }
  const parsed = configSchema.safeParse(picked);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const c = parsed.data;
  if (c.BATON_BOOTSTRAP_KEYS) {
    try {
      parseBootstrapKeys(c.BATON_BOOTSTRAP_KEYS);
    } catch (err) {
      throw new ConfigError(`invalid configuration:\n  BATON_BOOTSTRAP_KEYS: ${(err as Error).message}`);
    }
  }
  if (c.ARTIFACT_UPLOAD_BYTES_PER_SEC > 0 && c.ARTIFACT_UPLOAD_BURST_BYTES < c.ARTIFACT_MAX_BYTES) {
    throw new ConfigError('invalid configuration:\n  ARTIFACT_UPLOAD_BURST_BYTES: must be at least ARTIFACT_MAX_BYTES');
  }
  const heartbeat = c.HEARTBEAT_MS ?? Math.max(50, Math.floor(c.LEASE_MS / 4));
  if (heartbeat >= c.LEASE_MS) {
    throw new ConfigError('invalid configuration:\n  HEARTBEAT_MS: must be shorter than LEASE_MS');
  }
  return Object.freeze({ ...c, HEARTBEAT_MS: heartbeat });
}

/** Parses BATON_BOOTSTRAP_KEYS: `scope:role:key` entries separated by commas. */
export function parseBootstrapKeys(spec: string): { scope: string; role: ScopeRole; key: string }[] {
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const [scope, role, ...rest] = entry.split(':');
      const key = rest.join(':');
      if (!scope || !SCOPE_ROLES.includes(role as ScopeRole) || key.length < 16) {
        throw new Error(`BATON_BOOTSTRAP_KEYS entry "${scope}:${role}:…" must be scope:role:key with role client|admin and a key of 16+ chars`);
      }
      return { scope, role: role as ScopeRole, key };
    });
}
