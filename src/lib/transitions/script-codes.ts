import { BatonError } from '../errors.ts';

/**
 * The negative codes the Lua scripts return (as `CODE.<name>`: luaCodes below): refusals. The
 * units beside the scripts (transitions/<name>.ts) are the only readers: each turns a
 * code into a typed reply or, through scriptError, into a typed error. No other file compares a
 * code, and none compares a number.
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

/**
 * A closing transition's answer (retry, block, wait, release, finish): written, or refused
 * because the attempt's fence no longer holds the run (another attempt took it over, or it is
 * gone). A lost lease is a value here, the outcome the closing code makes of it (close.ts's
 * lease-lost), not an exception to catch around the call.
 */
export type Fenced<T> = { kind: 'written'; value: T } | { kind: 'lost' };
export const LOST = { kind: 'lost' } as const satisfies Fenced<never>;

/** A fenced write was refused: this process no longer holds the run's lease. */
export class LeaseLostError extends Error {
  constructor(readonly runId: string) {
    super(`lease on run ${runId} was lost`);
    this.name = 'LeaseLostError';
  }
}

/** expire, timeout and unserved: the run was left as it was, or ended now. */
const ended = { Unchanged: 0, Ended: 1 } as const;

/**
 * The codes a script answers when it did not refuse: what it did, by script (its name in
 * camelCase; scripts.ts generates the Lua table `OUTCOME` from this one, so lua/<name>.lua
 * returns `{ OUTCOME.claim.Ended, ... }`). 0 is the plain case. A script whose reply starts
 * with no code (drain, fork-scan, ...) has none here.
 */
export const Outcome = {
  submit: { Submitted: 0, Steered: 1 },
  steer: { Taken: 0 },
  append: { Applied: 0, Duplicate: 1 },
  /** An upload stored, throttled by the upload-rate bucket, or over the scope's quota. */
  artifact: { Stored: 0, Throttled: 1, OverQuota: 2 },
  cancel: { AlreadyFinished: 0, Cancelled: 1, Requested: 2 },
  /** An ended run deleted, or one not ended left as it was. */
  delete: { Deleted: 0, NotEnded: 1 },
  resolve: { Resolved: 0 },
  /** A fork begun, or not: its target is taken, the history changed, storage full, past its fork rate. */
  fork: { Begun: 0, TargetTaken: 1, HistoryChanged: 2, StorageFull: 3, Throttled: 4 },
  forkCopy: { Copied: 0, TargetTaken: 1, HistoryChanged: 2, Gone: 3 },
  claim: { Claimed: 0, Ended: 1 },
  heartbeat: { Renewed: 0, CancelRequested: 1 },
  step: { Recorded: 0 },
  retry: { Retrying: 0 },
  block: { Blocked: 0 },
  finish: { Finished: 0 },
  release: { Released: 0 },
  wait: { Parked: 0, CancelRequested: 1 },
  resume: { Resumed: 0 },
  waitTimeout: { Checked: 0 },
  /** A scheduled run looked at: `joined` says whether it joined its session now. */
  due: { Checked: 0 },
  fill: { Filled: 0 },
  repair: { Checked: 0 },
  expire: ended,
  timeout: ended,
  unserved: ended,
  /** One code per op: acquire answers Granted, Waiting or TooLarge; the other ops their own. */
  rateBucket: { Granted: 0, Waiting: 1, TooLarge: 2, Settled: 0, Paused: 0, Resumed: 0, Read: 0 },
  /** A model call's tokens held, refused, a usage field not a count, or no budget set. */
  budgetHold: { Held: 0, Refused: 1, Malformed: 2, NoBudget: 3 },
  schedulePause: { Paused: 0 },
  scheduleResume: { Resumed: 0 },
  /** A cron schedule's tick: claimed by this call, or not (gone, paused, claimed by another). */
  scheduleClaim: { Claimed: 0, NotClaimed: 1 },
  /** A claimed tick's done mark: made now, or the tick was not pending (done already). */
  scheduleDone: { Done: 0, NotPending: 1 },
  /** A bulk operation made, or not: its scope runs its cap of them already. */
  bulkCreate: { Created: 0, AtCap: 1 },
  bulkCancel: { Stopped: 0 },
  /** A bulk operation's batch: claimed, or not now (ended, leased, not yet due). */
  bulkClaim: { Claimed: 0, NotNow: 1 },
  /** A batch's commit: counted, or its lease had passed to another process. */
  bulkCommit: { Committed: 0, NotHeld: 1 },
} as const;

/** The Outcome group of a script (`wait-timeout` -> `waitTimeout`). */
/** (No outcome shares a refusal's name: a `-- @reply` line's name says which it is.) */
export function outcomeGroup(script: string): string {
  return script.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/**
 * The codes as Lua (scripts.ts puts it at the top of the library): `CODE.<ScriptCode key>` and
 * `OUTCOME.<script>.<Outcome key>`, the one place a number stands for a code on the Lua side.
 */
export function luaCodes(): string {
  const table = (o: Record<string, number>) => `{ ${Object.entries(o).map(([k, v]) => `${k} = ${v}`).join(', ')} }`;
  const groups = Object.entries(Outcome).map(([name, codes]) => `  ${name} = ${table(codes)},`);
  return [
    '-- Generated from src/lib/transitions/script-codes.ts (luaCodes): the refusals and each script\'s outcomes, by name.',
    'local CODE = {',
    ...Object.entries(ScriptCode).map(([k, v]) => `  ${k} = ${v},`),
    '}',
    'local OUTCOME = {',
    ...groups,
    '}',
  ].join('\n');
}

/**
 * A script's refusal: its (negative) code and the fields its `-- @reply` line names: `value`, the
 * number a few carry (RateLimited, HistoryFull, LeaseHeld, QueuedRunsLimit, StorageLimit), and
 * StorageLimit's ms until some may expire (`retryAfterMs`, 0: unknown); NotRunnable's `status`.
 */
export interface Refusal { code: number; value?: number; retryAfterMs?: number; status?: string }

/** The one mapping from a script's refusal to the error its caller throws. */
export function scriptError(refusal: Refusal, runId: string): Error {
  switch (refusal.code) {
    case ScriptCode.RateLimited: {
      const retryAfterMs = refusal.value ?? 0;
      return new BatonError('RATE_LIMITED', undefined, [{ path: 'scope', message: `retry in ${retryAfterMs} ms` }], { retryAfterMs });
    }
    case ScriptCode.HistoryFull:
      return new BatonError('SESSION_HISTORY_FULL', undefined, [
        { path: 'body.sessionId', message: `the session's history takes ${refusal.value ?? 0} bytes; HISTORY_MAX_BYTES is the limit` },
      ]);
    case ScriptCode.QueuedRunsLimit:
      return new BatonError('QUEUED_RUNS_LIMIT', undefined, [
        { path: 'scope', message: `the scope has ${refusal.value ?? 0} runs queued and not started; maxQueuedRuns is the limit` },
      ]);
    case ScriptCode.StorageLimit: return storageLimit(refusal.value ?? 0, refusal.retryAfterMs ?? 0);
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
