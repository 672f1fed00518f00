import { BatonError } from '../errors.ts';

/**
 * The negative codes the Lua scripts return (lua/core.lua lists them too): refusals. The
 * gateway (transitions.ts) is the only reader: it turns a code into a typed reply or, through
 * scriptError, into a typed error. No other file compares a code, and none compares a number.
 */
export const ScriptCode = {
  NotFound: -1,
  LeaseLost: -2,
  NotRunnable: -3,
  LeaseHeld: -4,
  SessionBusy: -5,
  Draining: -6,
  StepNotBlocked: -8,
  WaitNotPending: -9,
  IdempotencyMismatch: -12,
  RateLimited: -13,
  HistoryFull: -14,
  QueuedRunsLimit: -15,
  StorageLimit: -16,
} as const;
export type ScriptCode = (typeof ScriptCode)[keyof typeof ScriptCode];

/** A fenced write was refused: this process no longer holds the run's lease. */
export class LeaseLostError extends Error {
  constructor(readonly runId: string) {
    super(`lease on run ${runId} was lost`);
    this.name = 'LeaseLostError';
  }
}

/**
 * The codes a script answers when it did not refuse: what it did. Each script's own (its
 * lua/<name>.lua returns them); 0 is the plain case.
 */
export const Outcome = {
  append: { Applied: 0, Duplicate: 1 },
  artifact: { Stored: 0, RateLimited: 1, OverQuota: 2 },
  cancel: { AlreadyFinished: 0, Cancelled: 1, Requested: 2 },
  /** An ended run deleted, or one not ended left as it was. */
  delete: { Deleted: 0, NotEnded: 1 },
  fork: { Begun: 0, TargetTaken: 1, HistoryChanged: 2, StorageLimit: 3, RateLimited: 4 },
  forkCopy: { Copied: 0, TargetTaken: 1, HistoryChanged: 2, Gone: 3 },
  claim: { Claimed: 0, Ended: 1 },
  heartbeat: { Renewed: 0, CancelRequested: 1 },
  wait: { Parked: 0, CancelRequested: 1 },
  /** A cron schedule's tick: claimed by this call, or not (gone, paused, claimed by another). */
  scheduleClaim: { Claimed: 0, NotClaimed: 1 },
  /** A claimed tick's done mark: made now, or the tick was not pending (done already). */
  scheduleDone: { Done: 0, NotPending: 1 },
  /** A bulk operation made, or not: its scope runs its cap of them already. */
  bulkCreate: { Created: 0, AtCap: 1 },
  /** A bulk operation's batch: claimed, or not now (ended, leased, not yet due). */
  bulkClaim: { Claimed: 0, NotNow: 1 },
  /** A batch's commit: counted, or its lease had passed to another process. */
  bulkCommit: { Committed: 0, NotHeld: 1 },
  /** expire, timeout and unserved: the run was left as it was, or ended now. */
  end: { Unchanged: 0, Ended: 1 },
} as const;

/**
 * A script's refusal: its (negative) code and the number a few carry (RateLimited, HistoryFull,
 * LeaseHeld, QueuedRunsLimit, StorageLimit), and StorageLimit's ms until some may expire (0: unknown).
 */
export interface Refusal { code: number; value: number; retryAfterMs?: number }

/** Every refusal's code is negative. */
export function isRefusal(code: number): boolean {
  return code < 0;
}

/** The one mapping from a script's refusal to the error its caller throws. */
export function scriptError(refusal: Refusal, runId: string): Error {
  switch (refusal.code) {
    case ScriptCode.RateLimited: {
      const retryAfterMs = refusal.value;
      return new BatonError('RATE_LIMITED', undefined, [{ path: 'scope', message: `retry in ${retryAfterMs} ms` }], { retryAfterMs });
    }
    case ScriptCode.HistoryFull:
      return new BatonError('SESSION_HISTORY_FULL', undefined, [
        { path: 'body.sessionId', message: `the session's history takes ${refusal.value} bytes; HISTORY_MAX_BYTES is the limit` },
      ]);
    case ScriptCode.QueuedRunsLimit:
      return new BatonError('QUEUED_RUNS_LIMIT', undefined, [
        { path: 'scope', message: `the scope has ${refusal.value} runs queued and not started; maxQueuedRuns is the limit` },
      ]);
    case ScriptCode.StorageLimit: return storageLimit(refusal.value, refusal.retryAfterMs ?? 0);
    case ScriptCode.LeaseLost: return new LeaseLostError(runId);
    case ScriptCode.NotFound: return new BatonError('RUN_NOT_FOUND');
    case ScriptCode.SessionBusy: return new BatonError('SESSION_BUSY');
    case ScriptCode.Draining: return new BatonError('DRAINING');
    case ScriptCode.StepNotBlocked: return new BatonError('STEP_NOT_BLOCKED');
    case ScriptCode.WaitNotPending: return new BatonError('WAIT_NOT_PENDING');
    case ScriptCode.IdempotencyMismatch: return new BatonError('IDEMPOTENCY_MISMATCH');
    default: return new Error(`script for run ${runId} answered the unexpected code ${refusal.code}`);
  }
}

/** A submit or a fork past the scope's maxStoredBytes: `held` bytes stored, some may expire in `retryAfterMs` (0: unknown). */
export function storageLimit(held: number, retryAfterMs: number): BatonError {
  return new BatonError('STORAGE_LIMIT', undefined, [
    { path: 'scope', message: `the scope stores ${held} bytes; maxStoredBytes is the limit` },
  ], retryAfterMs > 0 ? { retryAfterMs } : {});
}
