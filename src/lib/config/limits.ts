import { z } from 'zod';

/**
 * A scope's limits: the defaults of what an operator sets per scope (PUT
 * /v1/scopes/{scope}/limits), and how the scopes share the workers.
 */
export const limitVars = {
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
   * the other scopes' while they contend for them (src/lib/engine/flow/fair-share.ts), and of each
   * provider rate-limit bucket's grants while they wait for it (transitions/rate-bucket.lua).
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
};
