import { z } from 'zod';
import { intMs } from './values.ts';

/** A run's life: leases and recovery, attempts and retries, how long it and its events are kept, its token writes and its waits. */
export const runVars = {
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
  /**
   * EMIT_FLUSH_MAX_MS / EMIT_FLUSH_FULL_AT: the window widens with the runs a worker process
   * streams at once, linearly from EMIT_FLUSH_MS for a lone run to 40 ms at 100 runs, so a
   * batch carries two tokens of a 50 tokens/s model (four at 100/s) when Redis is busiest: a
   * token waits 10 ms more on average and at most the window, within what a reader perceives
   * (a screen paints every 16.7 ms; chat pages smooth tokens on purpose). A window's end is
   * rounded up to the process's tick, an eighth of the widest window (5 ms), so the runs whose
   * windows end in one tick share an append call (src/lib/streams/appender.ts, atTick). 0: never widens.
   */
  EMIT_FLUSH_MAX_MS: intMs(40),
  EMIT_FLUSH_FULL_AT: z.coerce.number().int().min(1).default(100),
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
};
