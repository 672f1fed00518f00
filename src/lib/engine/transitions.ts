import type { ChainableCommander, Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { Keys, ScopeKeys } from '../keys.ts';
import type { Attempt } from './attempt.ts';
import type { Dispatcher } from './dispatcher.ts';
import type { WaitKind } from '../contract/runs.ts';
import { flatToObject, newRunPairs, parseRunRecord, RERUNS_KEPT, type NewRunRecord, type RunRecord } from './record.ts';
import { callScript, isMissingLibrary, loadLibrary, queueScript, type NamedKeys, type OptionsJson, type ScriptName } from './scripts.ts';
import { LeaseLostError, Outcome, outcomeGroup, ScriptCode, scriptError, storageLimit, type Refusal } from './script-codes.ts';
import { BatonError } from '../errors.ts';
import { ReplicaAcks } from '../redis/replica-acks.ts';

/**
 * The typed gateway to the Lua transitions (src/lib/engine/lua/): one function per script,
 * named arguments in, a decoded reply out. Nothing else calls a script (`npm test` checks).
 *
 * Each script gets its keys by name and its options as one JSON object (lua/lib/call.lua says
 * how), so adding a limit touches no positional list. A script that asks for runs to be
 * delivered returns dispatch orders; the gateway hands them to BullMQ before it returns
 * (the outbox step; the sweeper repairs a crash in between), so no caller can forget it.
 */

export type Multitask = 'enqueue' | 'reject' | 'interrupt' | 'steer';

/**
 * A run to accept: its record (the run's one encoding: record.ts, NewRunRecord), and how to
 * accept it. Its scope, id, session, runtime, agent and ttlMs are the record's.
 */
export interface NewRun {
  record: NewRunRecord;
  multitask: Multitask;
  /** The idempotency key, how long it is kept, and the request's digest kept with it (absent: none). */
  idempotency?: { key: string; ttlMs: number; requestHash: string };
  /** Due at this epoch ms (runAt) or this long after the submit (delayMs); absent: now. */
  runAt?: number;
  delayMs?: number;
  /** The scope's submit rate limit: a run made takes a token of its bucket (absent: none). */
  limit?: SubmitLimit;
  /** Bytes the turn's user message adds to the session's history, held against HISTORY_MAX_BYTES. */
  turnBytes: number;
  /** A re-run (the run it repeats is the record's rerunOf): the fields of that run's steps hash it starts with (reruns.ts). */
  rerun?: { copySteps: string[] };
  /** What the submit's caller was told (submissions.ts), put on the run's first status event. */
  warnings?: string[];
  /** Multitask `steer`: the message, and how long its id answers a resend (ms). */
  steering?: { id: string; content: string; ttlMs: number };
}

/** A token bucket: `rate` tokens a second, at most `burst` at once. */
export interface SubmitLimit { rate: number; burst: number }

/** One run's batch of events for appendMany: the writer's number, applied once per attempt. */
export interface AppendItem { attempt: Attempt; batch: number; events: readonly (readonly [string, string])[] }
export type AppendAnswer = 'applied' | 'duplicate';

/**
 * What the scripts are told of the fair share (O.level, O.capacity; src/lib/engine/flow/fair-share.ts):
 * the water level while scopes contend, and the live workers' slots.
 */
export interface FairLevel { level?: number; capacity?: number }

/** Where a fork ends (session-fork.ts): messages to copy, the runId the last must carry, the run it is at, and its token. */
export interface ForkAt { count: number; bytes: number; lastRunId: string; forkedAt: string; token: string }
export type ForkBegun = 'copying' | 'done' | 'target-taken' | 'history-changed';
/** One chunk of a fork's copy; `gone`: the fork's lease passed (its state expired) or it is another's. */
export type ForkChunk =
  | { kind: 'copying' | 'done'; messages: number; bytes: number }
  | { kind: 'target-taken' | 'history-changed' | 'gone' };

/** What one script call may copy or read: messages and bytes (one item larger than `bytes` comes alone). */
export interface CallBudget { messages: number; bytes: number }

export type SubmitReply = {
  created: boolean; runId: string; run: RunRecord | undefined;
  /** A steering message that went to the active run `runId` (no run made): as stored, and whether this submit sent it. */
  steered?: { message: StoredSteering; sent: boolean };
};

/** A steering message as the session's `steering` hash holds it (lua/submit.lua). */
export interface StoredSteering {
  id: string; runId: string; state: 'pending' | 'delivered' | 'not-delivered' | 'turn';
  content: string; step?: number; reason?: string; turnRunId?: string;
}

/** Messages a run took at one boundary (lua/steer.lua), in the order they were sent. */
export type TakenSteering = { id: string; content: string }[];

export type ClaimReply =
  | {
    kind: 'claimed'; run: RunRecord; fence: number; recovered: boolean; steps: Record<string, string>; history: string[];
    /** Older messages the agent's memory asked for did not fit HISTORY_READ_MAX_BYTES: `history` is the newest that did. */
    historyCut: boolean;
    /** The end of the run's timeoutMs budget and the claim's time, both Redis time (epoch ms). */
    deadline: number | undefined; now: number;
  }
  /**
   * The claim ended the run instead: cancelled (requested while no live worker held it),
   * expired (its ttlMs passed before it started) or failed (its timeoutMs was used up, or
    * its workers were lost more than MAX_RECOVERIES times: RECOVERY_LIMIT).
   */
  | { kind: 'ended'; status: 'cancelled' | 'expired' | 'failed' }
  /** A live lease holds the run, or its retry is not due: deliver again at `until`. */
  | { kind: 'later'; until: number }
  /** Unknown, finished, queued (a drain parks dispatched runs) or blocked: this delivery has nothing to do. */
  | { kind: 'nothing' };

/** An upload: stored, refused by the scope's upload rate, or refused by its quota (`held`: bytes the scope holds). */
export type ArtifactReply =
  | { kind: 'stored' }
  | { kind: 'rate-limited'; retryAfterMs: number }
  | { kind: 'over-quota'; held: number; retryAfterMs: number };

export type CancelReply = { outcome: 'already-finished' | 'cancelled' | 'requested'; run: RunRecord | undefined };

/** A delete's outcome: the ended run is gone, or it has not ended (left as it was), or there was none. */
export type DeleteOutcome = 'deleted' | 'not-ended' | 'not-found';

export type HeartbeatReply =
  | { kind: 'renewed'; cancelRequested: boolean }
  /** Another attempt holds the run now (or it is gone). */
  | { kind: 'lost' }
  /** This attempt closed the run itself while the beat was on its way. */
  | { kind: 'closed' }
  | { kind: 'failed'; error: Error };

export type StepWrite =
  | { op: 'start'; stepKey: string }
  | { op: 'done'; stepKey: string; result: string; usage?: StepUsage };

/** The model calls made for a step, counted with its result (once: only if this write stores it). */
export interface StepUsage {
  /** The agent that made them (the run's agent or a sub-agent). */
  agent: string;
  /** When the step finished (ms): its UTC day is the day the scope's usage is counted under. */
  at: number;
  calls: readonly { model: string; inputTokens: number; outputTokens: number }[];
}

/**
 * How long a scope's usage of a day is kept: past the longest range the usage route answers
 * (366 days), and bounded, so a scope's usage keys do not grow forever.
 */
export const USAGE_RETENTION_DAYS = 400;

export type Resolution = { value: unknown } | { rerun: true };

export interface FinishInput {
  status: 'succeeded' | 'failed' | 'cancelled';
  /** The result envelope, JSON text. */
  result: string;
  /** JSON text. */
  lastError?: string;
  /**
   * The turn to commit to the built-in history, JSON text: [user, assistant], or with steering
   * messages the user message, then each taken one after the answer's text before it, then the rest.
   */
  turn?: string[];
}

/** A wait an attempt reached and nobody answered yet, as the park transition takes it. */
export interface WaitRequest {
  /** `wait:<name>:<n>`. */
  key: string;
  kind: WaitKind;
  name: string;
  prompt?: unknown;
  schema?: Record<string, unknown>;
  /** Times out (a sleep ends) this long after the wait was first reached. */
  timeoutMs?: number;
  /** Ends at this epoch ms (ctx.sleepUntil). */
  untilMs?: number;
  /** SHA-256 (hex) of its resume token; input and approval waits have one. */
  tokenHash?: string;
}

/** A wait that stopped pending with an outcome, for the wait-duration histogram. */
export interface AnsweredWait { key?: string; kind: WaitKind; since: number }

export interface ParkReply {
  /** A cancel was requested meanwhile: the run was not parked; the attempt finishes it as cancelled. */
  cancelRequested: boolean;
  /** Waits whose deadline had passed by the park (they got their outcome in it). */
  answered: AnsweredWait[];
  /** The earliest deadline of the waits left pending. */
  nextAt: number | undefined;
  /** A wait the attempt reached had been answered meanwhile: the run was admitted again at once. */
  admittedAgain: boolean;
}

export interface ResumedWait { kind: WaitKind; since: number; runtime: string; agent: string }

/** One step on a provider's rate-limit bucket (lua/rate-bucket.lua), as RateLimiter (rate-limiter.ts) asks it. */
export type RateBucketCall =
  | {
    op: 'acquire'; rpm?: number; tpm?: number; tokens: number; pollMs: number; pauseMs: number;
    /** The spread: grants and tokens in any one second (absent: not spread). */
    second?: { requests?: number; tokens?: number };
    /**
     * A refused caller asks again within askMs; its place (in the fair order, or a large call's
     * hold on the second) lasts till then and graceMs more.
     */
    askMs: number; graceMs: number;
    /** The scope asking and its weight (absent: no place in the fair order). */
    scope?: string; weight?: number;
  }
  | { op: 'settle'; member: string; actual: number }
  /** `askedMs`: what a provider's Retry-After asked for, before the cap. */
  | { op: 'pause'; untilMs?: number; forMs?: number; by: 'provider' | 'operator'; askedMs?: number }
  | { op: 'resume' }
  | { op: 'read' };

export type RateBucketReply =
  /** Granted at `at` (Redis time); `member` names the grant for its settle. */
  | { kind: 'granted'; member: string; at: number; requests: number; tokens: number }
  | { kind: 'wait'; waitMs: number; why: RateWaitReason }
  | { kind: 'too-large'; tpm: number }
  | { kind: 'settled' }
  /** `moved`: this call set the pause or moved its end (a provider's pause only ever moves it later). */
  | { kind: 'paused'; pausedUntil: number; moved: boolean }
  | { kind: 'resumed'; lifted: boolean }
  /**
   * The window as of `now` (Redis time); pausedUntil 0: not paused, -1: until resumed; pausedAt
   * when it was set and pauseAsked a provider's Retry-After before the cap (0: not known, none);
   * the last second's grants; the scopes waiting (the first 20, next served first) and their count.
   */
  | {
    kind: 'state'; requests: number; tokens: number; reserved: number; pausedUntil: number; pausedBy: string; now: number;
    pausedAt: number; pauseAsked: number; secondRequests: number; secondTokens: number; waiting: string[]; waitingCount: number;
  };

/** Why an acquire must wait: a pause, the minute's requests or tokens, the second's spread, or a scope ahead in the fair order. */
export type RateWaitReason = 'paused' | 'requests' | 'tokens' | 'second' | 'share';

/** A cron schedule's due tick to claim (lua/schedule-claim.lua), as the scheduler worked it out. */
export interface TickClaim {
  /** The schedule's nextAt as the scheduler read it: the claim holds only while it still is. */
  expected: number;
  /** The schedule's nextAt after the claim (absent: its expression has no tick left). */
  next?: number;
  /** The tick to fire (absent: none, the missed ticks are skipped). */
  fire?: number;
  /** When a fired tick whose run is not confirmed made is looked at again. */
  retryAt: number;
}

/** What became of a claimed tick: its run, or the submit's refusal (the scope's state, not Redis's). */
export type TickOutcome = { runId: string } | { refused: { code: string; message: string } };

/** A bulk operation's batch to count (lua/bulk-commit.lua), fenced by the lease token its claim took. */
export interface BatchCommit {
  token: string;
  /** The claim's time (Redis time): the operation's finishedAt if this batch ends it. */
  now: number;
  matched: number;
  done: number;
  failed: number;
  /** The listing position the batch reached. */
  cursor: string;
  /** The listing has no more runs for the operation: it ends `done`. */
  finished: boolean;
  /** When the operation's next batch may start (its pace, or a back-off). */
  notBefore: number;
  /** The batch's last failed run (absent: none failed). */
  lastError?: { runId: string; code: string; message: string };
  /** How long an ended operation stays readable. */
  retentionMs: number;
}

/** A model call's hold on its scope's daily token budget (lua/budget-hold.lua). */
export interface BudgetHoldCall {
  /** The UTC day whose usage and holds it counts against. */
  day: string;
  /** TOKENS_PER_DAY: the budget when the scope's limits set none (0: none). */
  defaultLimit: number;
  /** The call's tokens at most; undefined: not known. */
  estimate?: number;
  /** What a call with no estimate holds (at most what is left). */
  unestimated: number;
  /** Unique per call: the hold's name in the day's holds. */
  member: string;
  /** How long the hold lasts unless let go first. */
  holdMs: number;
}

export type BudgetHoldReply =
  | { kind: 'held'; used: number; held: number; limit: number; reserved: number }
  | { kind: 'refused'; used: number; held: number; limit: number }
  | { kind: 'malformed'; field: string }
  | { kind: 'none' };

// ---- replies ----
// A script answers a positional list (the wire format): most start with a code, a refusal
// (ScriptCode, negative) or the script's outcome (Outcome), then that outcome's fields. Each
// transition's replies are declared once below, by outcome name, each with its fields in the
// order the script returns them and how each is decoded: the same lists, by the same names, as
// the `-- @reply` lines of its lua/<name>.lua (scripts/check-lua.mjs fails when the two
// disagree). A reply without a code (drain, fork-scan, ...) is declared under ''. Every
// method reads the decoded object by field name: the fields of the outcome answered, each
// other outcome's as their empty value (no method reads them).

const num = (v: unknown): number => Number(v);
const text = (v: unknown): string => (v === undefined ? '' : String(v));
const flag = (v: unknown): boolean => Number(v) === 1;
const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : []);
/** A run record as HGETALL lists it; undefined when the run is gone. */
const record = (v: unknown): RunRecord | undefined => (Array.isArray(v) ? parseRunRecord(v.map(String)) : undefined);
/** Dispatch orders, JSON text for the dispatcher (none when left out). */
const orders = (v: unknown): string => (v === undefined ? '[]' : String(v));
/** A JSON list a script encoded (cjson encodes an empty one as `{}`). */
const answered = (v: unknown): AnsweredWait[] => {
  if (v === undefined) return [];
  const list: unknown = JSON.parse(String(v));
  return Array.isArray(list) ? (list as AnsweredWait[]) : [];
};
/** An epoch ms, 0 for none. */
const time = (v: unknown): number | undefined => (Number(v) > 0 ? Number(v) : undefined);
const numbers = (v: unknown): number[] => (Array.isArray(v) ? v.map(Number) : []);

type Shape = Record<string, (v: unknown) => unknown>;
/** A transition's replies: outcome (or refusal) name -> its fields after the code; '' a reply without a code. */
type Replies = Record<string, Shape>;

const SUBMIT_REPLIES = {
  Submitted: { runId: text, created: flag, orders, run: record },
  /** A steering message the active run got: no run made. */
  Steered: { runId: text, message: text, sent: flag },
  SessionBusy: {}, Draining: {}, NotFound: {}, IdempotencyMismatch: {},
  RateLimited: { value: num }, HistoryFull: { value: num }, QueuedRunsLimit: { value: num },
  StorageLimit: { value: num, retryAfterMs: num },
} satisfies Replies;
const STEER_REPLIES = { Taken: { taken: text, fresh: flag }, LeaseLost: {} } satisfies Replies;
const HISTORY_PAGE_REPLIES = { '': { messages: strings, next: num } } satisfies Replies;
const FORK_REPLIES = {
  Begun: { whole: flag }, TargetTaken: {}, HistoryChanged: {},
  StorageFull: { held: num, retryAfterMs: num }, Throttled: { retryAfterMs: num },
} satisfies Replies;
const FORK_COPY_REPLIES = {
  Copied: { done: flag, messages: num, bytes: num }, TargetTaken: {}, HistoryChanged: {}, Gone: {},
} satisfies Replies;
const STORAGE_REPLIES = { '': { stored: num, more: flag } } satisfies Replies;
const FORK_SCAN_REPLIES = { '': { runIds: strings, sizes: numbers, next: num } } satisfies Replies;
const CANCEL_REPLIES = {
  AlreadyFinished: { orders, run: record }, Cancelled: { orders, run: record }, Requested: { orders, run: record }, NotFound: {},
} satisfies Replies;
const DELETE_REPLIES = { Deleted: {}, NotEnded: {}, NotFound: {} } satisfies Replies;
const RESOLVE_REPLIES = { Resolved: { orders }, NotFound: {}, StepNotBlocked: {} } satisfies Replies;
const DRAIN_REPLIES = { '': { cancelled: num, left: num, orders } } satisfies Replies;
const UNDRAIN_REPLIES = { '': { resumed: num, left: num, orders } } satisfies Replies;
const ARTIFACT_REPLIES = {
  Stored: {}, Throttled: { held: num, retryAfterMs: num }, OverQuota: { held: num, retryAfterMs: num },
} satisfies Replies;
const READ_COST_REPLIES = { '': { left: num, retryAfterMs: num } } satisfies Replies;
const CLAIM_REPLIES = {
  Claimed: {
    fence: num, attempt: num, recovered: flag, run: record, steps: strings, history: strings,
    deadline: time, now: num, historyCut: flag,
  },
  /** The claim ended the run instead (cancelled, expired, failed). */
  Ended: { orders, status: text },
  NotFound: {}, NotRunnable: { status: text }, LeaseHeld: { value: num },
} satisfies Replies;
/** One entry per run renewed, in order (a list of codes). */
const HEARTBEAT_REPLIES = { Renewed: {}, CancelRequested: {}, LeaseLost: {}, NotRunnable: {} } satisfies Replies;
/** Two entries per run, in order: its code and the id of its last event ('' when none was added). */
const APPEND_REPLIES = { Applied: { lastId: text }, Duplicate: { lastId: text }, LeaseLost: { lastId: text } } satisfies Replies;
const STEP_REPLIES = { Recorded: { result: text }, LeaseLost: {} } satisfies Replies;
const RETRY_REPLIES = { Retrying: { retryAt: num, orders }, LeaseLost: {} } satisfies Replies;
const BLOCK_REPLIES = { Blocked: { orders }, LeaseLost: {} } satisfies Replies;
const FINISH_REPLIES = { Finished: { orders, notDelivered: num }, LeaseLost: {} } satisfies Replies;
const RELEASE_REPLIES = { Released: { orders }, LeaseLost: {} } satisfies Replies;
const WAIT_REPLIES = {
  Parked: { orders, answered, nextAt: time, admittedAgain: flag }, CancelRequested: {}, LeaseLost: {},
} satisfies Replies;
const RESUME_REPLIES = {
  Resumed: { orders, kind: text, since: num, runtime: text, agent: text }, NotFound: {}, WaitNotPending: {},
} satisfies Replies;
const WAIT_TIMEOUT_REPLIES = { Checked: { orders, answered, runtime: text, agent: text } } satisfies Replies;
const DUE_REPLIES = { Checked: { orders, joined: flag } } satisfies Replies;
const FILL_REPLIES = { Filled: { orders } } satisfies Replies;
/** expire, timeout and unserved: the run left as it was, or ended now. */
const ENDED_REPLIES = { Unchanged: {}, Ended: { orders, run: record } } satisfies Replies;
const REPAIR_REPLIES = { Checked: { orders } } satisfies Replies;
/** By op: acquire answers Granted, Waiting or TooLarge; settle, pause, resume and read their own. */
const RATE_BUCKET_REPLIES = {
  Granted: { member: text, at: num, requests: num, tokens: num },
  Waiting: { waitMs: num, why: text },
  TooLarge: { tpm: num },
  Settled: {},
  Paused: { pausedUntil: num, moved: flag },
  Resumed: { lifted: flag },
  Read: {
    requests: num, tokens: num, reserved: num, pausedUntil: num, pausedBy: text, now: num,
    pausedAt: num, pauseAsked: num, secondRequests: num, secondTokens: num, waiting: strings, waitingCount: num,
  },
} satisfies Replies;
const BUDGET_HOLD_REPLIES = {
  Held: { used: num, held: num, limit: num, reserved: num },
  Refused: { used: num, held: num, limit: num },
  Malformed: { field: text },
  NoBudget: {},
} satisfies Replies;
const SCHEDULE_PAUSE_REPLIES = { Paused: {}, NotFound: {} } satisfies Replies;
const SCHEDULE_RESUME_REPLIES = { Resumed: {}, NotFound: {} } satisfies Replies;
const SCHEDULE_CLAIM_REPLIES = { Claimed: {}, NotClaimed: {} } satisfies Replies;
const SCHEDULE_DONE_REPLIES = { Done: {}, NotPending: {} } satisfies Replies;
const BULK_CREATE_REPLIES = { Created: {}, AtCap: {} } satisfies Replies;
const BULK_CANCEL_REPLIES = { Stopped: {}, NotFound: {} } satisfies Replies;
const BULK_CLAIM_REPLIES = { Claimed: { cursor: text }, NotNow: {} } satisfies Replies;
const BULK_COMMIT_REPLIES = { Committed: {}, NotHeld: {} } satisfies Replies;

/** Each transition's replies by name (scripts/check-lua.mjs holds them against the scripts' `-- @reply` lines). */
export const REPLIES = {
  'submit': SUBMIT_REPLIES, 'steer': STEER_REPLIES, 'history-page': HISTORY_PAGE_REPLIES, 'fork': FORK_REPLIES,
  'fork-copy': FORK_COPY_REPLIES, 'storage': STORAGE_REPLIES, 'fork-scan': FORK_SCAN_REPLIES, 'cancel': CANCEL_REPLIES,
  'delete': DELETE_REPLIES, 'resolve': RESOLVE_REPLIES, 'drain': DRAIN_REPLIES, 'undrain': UNDRAIN_REPLIES,
  'artifact': ARTIFACT_REPLIES, 'read-cost': READ_COST_REPLIES, 'claim': CLAIM_REPLIES, 'heartbeat': HEARTBEAT_REPLIES,
  'append': APPEND_REPLIES, 'step': STEP_REPLIES, 'retry': RETRY_REPLIES, 'block': BLOCK_REPLIES, 'finish': FINISH_REPLIES,
  'release': RELEASE_REPLIES, 'wait': WAIT_REPLIES, 'resume': RESUME_REPLIES, 'wait-timeout': WAIT_TIMEOUT_REPLIES,
  'due': DUE_REPLIES, 'fill': FILL_REPLIES, 'expire': ENDED_REPLIES, 'timeout': ENDED_REPLIES, 'unserved': ENDED_REPLIES,
  'repair': REPAIR_REPLIES, 'rate-bucket': RATE_BUCKET_REPLIES, 'budget-hold': BUDGET_HOLD_REPLIES,
  'schedule-pause': SCHEDULE_PAUSE_REPLIES, 'schedule-resume': SCHEDULE_RESUME_REPLIES,
  'schedule-claim': SCHEDULE_CLAIM_REPLIES, 'schedule-done': SCHEDULE_DONE_REPLIES,
  'bulk-create': BULK_CREATE_REPLIES, 'bulk-cancel': BULK_CANCEL_REPLIES, 'bulk-claim': BULK_CLAIM_REPLIES,
  'bulk-commit': BULK_COMMIT_REPLIES,
} as const satisfies Record<ScriptName, Replies>;

type Replied = keyof typeof REPLIES;
type RefusalName = keyof typeof ScriptCode;
type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
type Fields<S> = { [F in keyof S]: S[F] extends (v: unknown) => infer T ? T : never };
type Outcomes<N extends Replied> = Exclude<keyof (typeof REPLIES)[N], RefusalName | ''> & string;
/** A reply's answer: a coded one names its outcome and carries every outcome's fields (those of others empty). */
type Answer<N extends Replied> = '' extends keyof (typeof REPLIES)[N]
  ? Fields<(typeof REPLIES)[N]['' & keyof (typeof REPLIES)[N]]>
  : { outcome: Outcomes<N>; code: number } & Fields<UnionToIntersection<(typeof REPLIES)[N][Outcomes<N>]>>;
/** A decoded reply: a refusal (only a coded reply can be one) or the script's answer. */
type Reply<N extends Replied> = '' extends keyof (typeof REPLIES)[N]
  ? Answer<N>
  : ({ refused?: undefined } & Answer<N>) | { refused: Refusal };

/** The fields of `shape` from `raw`, starting at position `at`. */
function fieldsOf(shape: Shape, raw: unknown[], at: number): Record<string, unknown> {
  return Object.fromEntries(Object.keys(shape).map((field, i) => [field, shape[field](raw[at + i])]));
}

/**
 * The one place a reply's positions are read. `among` (optional): the outcomes the call may
 * answer, when several of the script's share a code (rate-bucket's ops).
 */
function decode<N extends Replied>(name: N, raw: unknown, among?: readonly Outcomes<N>[]): Reply<N> {
  if (!Array.isArray(raw)) throw new Error(`the ${name} script answered ${typeof raw}, not a list`);
  const replies: Replies = REPLIES[name];
  if ('' in replies) return fieldsOf(replies[''], raw, 0) as Reply<N>;
  const code = Number(raw[0]);
  const group: Record<string, number> = (Outcome as Record<string, Record<string, number>>)[outcomeGroup(name)] ?? {};
  const codes: Record<string, number> = ScriptCode;
  const allowed = (outcome: string) => !among || (among as readonly string[]).includes(outcome) || outcome in codes;
  const names = Object.keys(replies).filter((outcome) => (outcome in codes ? codes[outcome] : group[outcome]) === code && allowed(outcome));
  if (names.length !== 1) throw new Error(`the ${name} script answered the unexpected code ${code}`);
  const outcome = names[0];
  if (outcome in codes) return { refused: { code, ...fieldsOf(replies[outcome], raw, 1) } as Refusal } as Reply<N>;
  const answer: Record<string, unknown> = { outcome, code };
  for (const [other, shape] of Object.entries(replies)) {
    if (other !== outcome && !(other in codes)) Object.assign(answer, fieldsOf(shape, [], 0));
  }
  return Object.assign(answer, fieldsOf(replies[outcome], raw, 1)) as Reply<N>;
}

/** A reply that is never a refusal. */
function decodeAnswer<N extends Replied>(name: N, raw: unknown, among?: readonly Outcomes<N>[]): Answer<N> {
  const reply = decode(name, raw, among) as Reply<N> & { refused?: Refusal };
  if (reply.refused) throw new Error(`the ${name} reply was a refusal (${reply.refused.code})`);
  return reply as Answer<N>;
}

/**
 * The transitions whose loss in a failover would break a promise: an accepted run, a step's
 * result or its start marker (a non-idempotent step must not run again), a stream's events
 * (a reader must find again what it was sent), a turn's history, a wait's resolution, an
 * operator's resolution, a cancel, a delete (lost, a run answered deleted could be read
 * again), and a steering message's delivery (lost, the next model call
 * made with it could be followed by a second delivery at a later boundary). Of the schedules' and bulk operations' own: a schedule's
 * pause and resume and a bulk operation's creation and stop (what the API answered would be
 * undone: a paused schedule would fire again, a stopped operation go on), and a tick's done
 * mark, which says the tick is over: lost, the tick is pending again and submitted again, and
 * only its idempotency key (kept a day) stands between that and a second run; a tick refused,
 * and shown so, could still make one. With REDIS_MIN_REPLICAS_ACK, each answers only once that
 * many replicas hold it (replica-acks.ts). The others are repaired after a failover that lost
 * them: a lost heartbeat, park, retry or hand-over leaves a lease that runs out, and the run is
 * taken over from its memoized steps; a lost tick claim lets the tick be
 * claimed again, and its submit's idempotency key answers the run made the first time; a lost
 * bulk claim or commit has the batch done again from the cursor it started at (a cancel of an
 * ended run changes nothing, a re-run's key answers the re-run already made), and only a commit
 * counts, so each run is still counted once.
 */
const REPLICATED: ReadonlySet<ScriptName> = new Set([
  'submit', 'step', 'steer', 'append', 'finish', 'resume', 'resolve', 'cancel', 'delete', 'fork', 'fork-copy',
  'schedule-pause', 'schedule-resume', 'schedule-done', 'bulk-create', 'bulk-cancel',
]);

export class Transitions {
  /** The limits every script shares, the first fields of its options (they never change). */
  private readonly limits: Record<string, unknown>;
  /** Replica acknowledgements the REPLICATED transitions wait for (absent: none asked). */
  private readonly acks: ReplicaAcks | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly dispatcher: Dispatcher,
    /** The fair share this process knows (src/lib/engine/flow/fair-share.ts): level while scopes contend, live workers' slots. */
    private readonly fairLevel: () => FairLevel = () => ({}),
  ) {
    this.limits = {
      maxLen: config.EVENTS_MAX_LEN,
      maxActive: config.MAX_ACTIVE_PER_SCOPE,
      maxActivePerKey: config.MAX_ACTIVE_PER_KEY,
      weight: config.SCOPE_WEIGHT,
      priorityStepMs: config.PRIORITY_STEP_MS,
      limit: { rate: config.SUBMIT_RATE_PER_SEC, burst: config.SUBMIT_BURST },
      graceMs: config.DISPATCH_GRACE_MS,
      retention: config.RETENTION_MS,
      cancelChannel: keys.cancelChannel,
      storage: {
        queued: config.MAX_QUEUED_RUNS_PER_SCOPE, bytes: config.STORAGE_MAX_BYTES_PER_SCOPE,
        forks: config.FORKS_PER_MINUTE, forkBytes: config.FORK_BYTES_PER_MINUTE,
      },
    };
    if (config.REDIS_MIN_REPLICAS_ACK > 0) {
      this.acks = new ReplicaAcks(redis, config.REDIS_MIN_REPLICAS_ACK, config.REDIS_REPLICA_ACK_TIMEOUT_MS);
    }
  }

  // ---- API side ----

  async submit(r: NewRun): Promise<SubmitReply> {
    const run = r.record;
    const sk = this.keys.scope(run.scope);
    const rerunOf = r.rerun ? run.rerunOf : undefined;
    if (r.rerun && rerunOf === undefined) throw new Error('a re-run\'s record names the run it repeats (rerunOf)');
    const raw = await this.callRaw('submit', run.scope, {
      ...this.slotKeys(sk, run.id), runs: sk.runs, session: sk.session(run.sessionId),
      sessionRuns: sk.sessionRuns(run.sessionId), agentRuns: sk.runsByAgent(run.agent), runtimeRuns: sk.runsByRuntime(run.runtime),
      idem: r.idempotency && sk.idempotency(r.idempotency.key),
      bucket: sk.submitBucket, messages: sk.messages(run.sessionId),
      steering: r.steering && sk.steering(run.sessionId),
      ...(rerunOf !== undefined
        ? { rerunOf: sk.run(rerunOf), copyFrom: sk.steps(rerunOf), steps: sk.steps(run.id), reruns: sk.reruns(rerunOf) }
        : {}),
    }, {
      multitask: r.multitask, idemTtlMs: r.idempotency?.ttlMs,
      runAt: r.runAt, delayMs: r.delayMs, requestHash: r.idempotency?.requestHash,
      // No limit given: none but what the scope's own limits set.
      limit: r.limit ?? { rate: 0, burst: 1 },
      historyMax: this.config.HISTORY_MAX_BYTES, turnBytes: r.turnBytes,
      ...(r.rerun ? { copySteps: r.rerun.copySteps, rerunsKept: RERUNS_KEPT } : {}),
      ...(r.warnings?.length ? { warnings: r.warnings } : {}),
      ...(r.steering ? { message: r.steering } : {}),
      // The record crosses once, as name/value pairs beside the options (lua/submit.lua reads it
      // at its top): raw text, so a large input costs Redis no JSON decoding.
    }, newRunPairs(run));
    const reply = decode('submit', raw);
    if (reply.refused) throw scriptError(reply.refused, run.id);
    if (reply.outcome === 'Steered') {
      const message = JSON.parse(reply.message) as StoredSteering;
      return { runId: reply.runId, created: false, run: undefined, steered: { message, sent: reply.sent } };
    }
    await this.dispatch(run.scope, reply.orders);
    // An idempotent repeat whose run has passed its retention comes back without a record.
    return { runId: reply.runId, created: reply.created, run: reply.run };
  }

  /**
   * A page of a session's history from index `start`, oldest first: at most `limit` messages
   * and `maxBytes` bytes (the first message whatever its size). Read-only; `next` is the index
   * the next page starts at, undefined after the last message.
   */
  async historyPage(
    scope: string, sessionId: string, start: number, limit: number, maxBytes: number,
  ): Promise<{ messages: string[]; next?: number }> {
    const reply = await this.call('history-page', scope, { messages: this.keys.scope(scope).messages(sessionId) }, { start, limit, maxBytes });
    return { messages: reply.messages, ...(reply.next >= 0 ? { next: reply.next } : {}) };
  }

  /**
   * A page of a session's history from index `start` as a fork looks for its end: each
   * message's runId and size in bytes, not its text (lua/fork-scan.lua), within `budget`.
   * `next` is the index the next page starts at, undefined after the last message.
   */
  async forkScan(
    scope: string, sessionId: string, start: number, budget: CallBudget,
  ): Promise<{ runIds: string[]; sizes: number[]; next?: number }> {
    const reply = await this.call('fork-scan', scope, { messages: this.keys.scope(scope).messages(sessionId) }, {
      start, maxMessages: budget.messages, maxBytes: budget.bytes,
    });
    return { runIds: reply.runIds, sizes: reply.sizes, ...(reply.next >= 0 ? { next: reply.next } : {}) };
  }

  /**
   * Begins a fork of the first `count` messages of a session's history into a new session
   * (lua/fork.lua), if the last of them still carries `lastRunId` and the new session has no
   * history, runs or fork under way; `token` names the fork for its chunks (forkCopy). A fork
   * of nothing is whole at once ('done').
   */
  async forkBegin(scope: string, from: string, to: string, at: ForkAt): Promise<ForkBegun> {
    const reply = await this.call('fork', scope, this.forkKeys(scope, from, to), {
      count: at.count, bytes: at.bytes, lastRunId: at.lastRunId, fromSession: from, forkedAt: at.forkedAt, token: at.token,
      leaseMs: FORK_LEASE_MS,
    });
    if (reply.refused) throw scriptError(reply.refused, '');
    switch (reply.code) {
      case Outcome.fork.TargetTaken: return 'target-taken';
      case Outcome.fork.HistoryChanged: return 'history-changed';
      case Outcome.fork.StorageFull: throw storageLimit(reply.held, reply.retryAfterMs);
      case Outcome.fork.Throttled: {
        const retryAfterMs = reply.retryAfterMs;
        throw new BatonError('FORK_RATE_LIMITED', undefined, [{ path: 'scope', message: `retry in ${retryAfterMs} ms` }], { retryAfterMs });
      }
      default: return reply.whole ? 'done' : 'copying';
    }
  }

  /**
   * Copies the next chunk of the fork `token` (lua/fork-copy.lua): at most `budget.messages`
   * messages and `budget.bytes` bytes (one larger message alone). The chunk that copies the
   * last message makes the copy the new session's history, in the same call.
   */
  async forkCopy(scope: string, from: string, to: string, token: string, budget: CallBudget): Promise<ForkChunk> {
    const reply = await this.call('fork-copy', scope, this.forkKeys(scope, from, to), {
      token, leaseMs: FORK_LEASE_MS, maxMessages: budget.messages, maxBytes: budget.bytes,
    });
    if (reply.refused) throw scriptError(reply.refused, '');
    switch (reply.code) {
      case Outcome.forkCopy.Copied: return { kind: reply.done ? 'done' : 'copying', messages: reply.messages, bytes: reply.bytes };
      case Outcome.forkCopy.TargetTaken: return { kind: 'target-taken' };
      case Outcome.forkCopy.HistoryChanged: return { kind: 'history-changed' };
      case Outcome.forkCopy.Gone: return { kind: 'gone' };
      default: throw new Error(`the fork-copy script answered the unexpected code ${reply.code}`);
    }
  }

  async cancel(scope: string, runId: string): Promise<CancelReply> {
    const reply = await this.call('cancel', scope, this.slotKeys(this.keys.scope(scope), runId), { runId });
    if (reply.refused) throw scriptError(reply.refused, runId);
    await this.dispatch(scope, reply.orders);
    return { outcome: cancelOutcome(reply.code), run: reply.run };
  }

  /** Deletes an ended run now, as its retention's end would (lua/delete.lua); one not ended is left as it is. */
  async deleteRun(scope: string, runId: string): Promise<DeleteOutcome> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('delete', scope, { run: sk.run(runId), runs: sk.runs }, { runId });
    if (reply.refused) return notFound('delete', reply.refused);
    switch (reply.code) {
      case Outcome.delete.Deleted: return 'deleted';
      case Outcome.delete.NotEnded: return 'not-ended';
      default: throw new Error(`the delete script answered the unexpected code ${reply.code}`);
    }
  }

  /** Lets a blocked run continue: with the operator's value for the step, or re-running it. */
  async resolve(scope: string, runId: string, stepKey: string, resolution: Resolution): Promise<void> {
    const sk = this.keys.scope(scope);
    const options = 'rerun' in resolution
      ? { runId, stepKey, mode: 'rerun' }
      : { runId, stepKey, mode: 'value', value: JSON.stringify({ v: resolution.value }) };
    const reply = await this.call('resolve', scope, { ...this.slotKeys(sk, runId), steps: sk.steps(runId) }, options);
    if (reply.refused) throw scriptError(reply.refused, runId);
    await this.dispatch(scope, reply.orders);
  }

  /** One batch of a drain: sets the flag; with cancelQueued, cancels up to `batch` waiting runs. */
  async drain(scope: string, runtime: string, o: { cancelQueued: boolean; batch: number }): Promise<{ cancelled: number; left: number }> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('drain', scope, {
      drain: sk.drain(runtime), waiting: sk.waiting(runtime), held: sk.held(runtime), ...this.slotKeys(sk),
    }, { runtime, ...o });
    // Cancelling a session head hands its scope slot on, possibly to another runtime's run.
    await this.dispatch(scope, reply.orders);
    return { cancelled: reply.cancelled, left: reply.left };
  }

  /** One batch of a resume: `first` lifts the flag; parked heads are admitted in order. */
  async undrain(scope: string, runtime: string, o: { first: boolean; batch: number }): Promise<{ resumed: number; left: number }> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('undrain', scope, { drain: sk.drain(runtime), held: sk.held(runtime), ...this.slotKeys(sk) }, o);
    await this.dispatch(scope, reply.orders);
    return { resumed: reply.resumed, left: reply.left };
  }

  /**
   * Stores an uploaded artifact within its scope's quotas (lua/artifact.lua): `maxBytes`
   * held at once (0: no quota), and the upload-rate bucket `limit` in bytes (absent: none).
   */
  async storeArtifact(
    scope: string,
    a: { id: string; contentType: string; size: number; createdAt: number; bytes: Buffer },
    o: { maxBytes: number; limit?: SubmitLimit },
  ): Promise<ArtifactReply> {
    const sk = this.keys.scope(scope);
    // The bytes are the payload: ioredis sends a Buffer as it is, binary intact.
    const payload = [a.bytes as unknown as string];
    const reply = await this.call('artifact', scope, {
      artifact: sk.artifact(a.id), ledger: sk.artifactLedger, stored: sk.artifactBytes, bucket: o.limit ? sk.artifactBucket : undefined,
    }, { id: a.id, contentType: a.contentType, size: a.size, createdAt: a.createdAt, maxBytes: o.maxBytes, limit: o.limit }, payload);
    if (reply.refused) throw new Error(`the artifact script answered the unexpected code ${reply.refused.code}`);
    switch (reply.code) {
      case Outcome.artifact.Stored: return { kind: 'stored' };
      case Outcome.artifact.Throttled: return { kind: 'rate-limited', retryAfterMs: reply.retryAfterMs };
      case Outcome.artifact.OverQuota: return { kind: 'over-quota', held: reply.held, retryAfterMs: reply.retryAfterMs };
      default: throw new Error(`the artifact script answered the unexpected code ${reply.code}`);
    }
  }

  /**
   * Charges `bytes` a costly read served to the scope's read budget (lua/read-cost.lua; 0: a
   * look, nothing written): `limit` is the configured default (rate 0: none), the scope's own
   * limits override it. Answers what the bucket holds after it, and how long the scope's costly
   * reads are refused (0: not).
   */
  async chargeRead(scope: string, bytes: number, limit: SubmitLimit): Promise<{ left: number; retryAfterMs: number }> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('read-cost', scope, { bucket: sk.readBucket, limits: sk.limits }, { bytes, ...limit });
    return { left: reply.left, retryAfterMs: reply.retryAfterMs };
  }

  // ---- worker side ----

  /**
   * Claims a delivered run for `workerId`: a new attempt, or the takeover of an expired
   * lease. `agentDefaults` are this worker's agents' default attempts ({} = none);
   * `historyReads` how many of the session's newest messages to return for each agent (-1
   * all; an agent not named gets none).
   */
  async claim(
    job: { scope: string; runId: string }, workerId: string, agentDefaults: Record<string, number>,
    historyReads: Record<string, number> = {},
  ): Promise<ClaimReply> {
    const sk = this.keys.scope(job.scope);
    const raw = await this.callRaw('claim', job.scope, this.slotKeys(sk, job.runId), {
      runId: job.runId, workerId, leaseMs: this.config.LEASE_MS, maxRecoveries: this.config.MAX_RECOVERIES,
      agentDefaults: Object.keys(agentDefaults).length ? agentDefaults : undefined,
      historyReads: Object.keys(historyReads).length ? historyReads : undefined,
      historyBytes: this.config.HISTORY_READ_MAX_BYTES,
    });
    const reply = decode('claim', raw);
    if (reply.refused) {
      return reply.refused.code === ScriptCode.LeaseHeld ? { kind: 'later', until: reply.refused.value ?? 0 } : { kind: 'nothing' };
    }
    switch (reply.code) {
      case Outcome.claim.Claimed: {
        if (!reply.run) return { kind: 'nothing' };
        return {
          kind: 'claimed', run: reply.run, fence: reply.fence, recovered: reply.recovered,
          steps: flatToObject(reply.steps), history: reply.history, historyCut: reply.historyCut,
          deadline: reply.deadline, now: reply.now,
        };
      }
      case Outcome.claim.Ended: {
        await this.dispatch(job.scope, reply.orders);
        return { kind: 'ended', status: reply.status as 'cancelled' | 'expired' | 'failed' };
      }
      default:
        return { kind: 'nothing' };
    }
  }

  /**
   * Renews the leases of many attempts in one pipeline (one round trip for a whole worker):
   * one script call per scope, for up to HEARTBEAT_BATCH of its runs.
   */
  heartbeat(attempts: readonly Attempt[]): Promise<HeartbeatReply[]> {
    return this.beat(attempts, true);
  }

  /** One heartbeat pipeline; `reload`: a server that lost the library gets it and a second beat. */
  private async beat(attempts: readonly Attempt[], reload: boolean): Promise<HeartbeatReply[]> {
    if (attempts.length === 0) return [];
    const batches = new Map<string, number[]>();
    attempts.forEach((a, i) => {
      const batch = batches.get(a.keys.leases);
      if (batch) batch.push(i);
      else batches.set(a.keys.leases, [i]);
    });
    const calls: number[][] = [];
    const pipe: ChainableCommander = this.redis.pipeline();
    for (const indexes of batches.values()) {
      for (let from = 0; from < indexes.length; from += HEARTBEAT_BATCH) {
        const call = indexes.slice(from, from + HEARTBEAT_BATCH);
        const first = attempts[call[0]];
        queueScript(pipe, 'heartbeat', { leases: first.keys.leases }, this.options(first.keys.base, {
          runs: call.map((i) => [attempts[i].runId, attempts[i].fence]), leaseMs: this.config.LEASE_MS,
        }));
        calls.push(call);
      }
    }
    const replies: HeartbeatReply[] = [];
    let results: [Error | null, unknown][] | null;
    try {
      results = await pipe.exec();
    } catch (err) {
      return attempts.map(() => ({ kind: 'failed', error: err as Error }));
    }
    // The server lost the library (a restart without persistence): load it and beat again.
    if (reload && results?.some(([err]) => isMissingLibrary(err))) {
      try {
        await loadLibrary(this.redis);
      } catch (err) {
        return attempts.map(() => ({ kind: 'failed', error: err as Error }));
      }
      return this.beat(attempts, false);
    }
    calls.forEach((call, c) => {
      const [err, reply] = results?.[c] ?? [new Error('no reply'), null];
      const codes = !err && Array.isArray(reply) && reply.length === call.length ? reply : undefined;
      call.forEach((i, n) => {
        replies[i] = codes ? heartbeatReply(codes[n]) : { kind: 'failed', error: err ?? new Error('malformed heartbeat reply') };
      });
    });
    return replies;
  }

  /** A fenced lease renewal of one attempt; throws LeaseLostError unless it still holds the run. */
  async assertLease(attempt: Attempt): Promise<void> {
    const [reply] = await this.heartbeat([attempt]);
    if (reply.kind === 'failed') throw reply.error;
    if (reply.kind !== 'renewed') throw new LeaseLostError(attempt.runId);
  }

  /**
   * Records a memoized step's start marker or its result; returns the stored result (first
   * writer wins). A result's usage is counted, for the run and the scope's day, only by the
   * write that stores it.
   */
  async step(attempt: Attempt, write: StepWrite): Promise<string> {
    const usage = write.op === 'done' ? write.usage : undefined;
    const day = usage && new Date(usage.at).toISOString().slice(0, 10);
    const reply = await this.call('step', attempt.scope, {
      run: attempt.runKey, steps: attempt.keys.steps(attempt.runId), usage: day && attempt.keys.usage(day),
    }, usage
      ? {
        fence: attempt.fence, ...write, usage: { agent: usage.agent, calls: usage.calls },
        usageTtlMs: USAGE_RETENTION_DAYS * 86_400_000, usageRows: this.config.USAGE_ROWS_PER_DAY,
      }
      : { fence: attempt.fence, ...write });
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    return reply.result;
  }

  /**
   * Takes the run's steering messages at its boundary number `boundary` (lua/steer.lua): those
   * pending now, or, at a boundary an earlier attempt reached, the ones taken there then
   * (`fresh` false).
   */
  async steer(attempt: Attempt, sessionId: string, boundary: number): Promise<{ taken: TakenSteering; fresh: boolean }> {
    const sk = attempt.keys;
    const reply = await this.call('steer', attempt.scope, {
      run: attempt.runKey, steering: sk.steering(sessionId), pending: sk.steerPending(attempt.runId), taken: sk.steerTaken(attempt.runId),
    }, { runId: attempt.runId, fence: attempt.fence, boundary });
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    const taken: unknown = JSON.parse(reply.taken);
    return { taken: Array.isArray(taken) ? (taken as TakenSteering) : [], fresh: reply.fresh };
  }

  /**
   * Appends numbered batch `batch` of events (type, JSON data) to the run's log; a batch
   * number is applied once. Returns 'duplicate' when this batch had landed already.
   */
  async append(attempt: Attempt, batch: number, events: readonly (readonly [string, string])[]): Promise<'applied' | 'duplicate'> {
    const [reply] = await this.appendMany([{ attempt, batch, events }]);
    if (reply instanceof Error) throw reply;
    return reply;
  }

  /**
   * Appends the batches of several runs of one scope in one call (one notification for all):
   * one answer per item, in order, a LeaseLostError for an item whose lease moved on. A call
   * that fails (Redis) rejects; every item may then be sent again, as each batch applies once.
   */
  async appendMany(items: readonly AppendItem[]): Promise<(AppendAnswer | LeaseLostError)[]> {
    if (items.length === 0) return [];
    const first = items[0].attempt;
    if (items.some((i) => i.attempt.scope !== first.scope)) throw new Error('appendMany takes the runs of one scope');
    const raw = await this.callRaw('append', first.scope, { run: first.runKey }, {
      runs: items.map((i) => [i.attempt.runId, i.attempt.fence, i.batch, i.events.length]),
    }, items.flatMap((i) => i.events.flat()));
    if (!Array.isArray(raw) || raw.length !== 2 * items.length) throw new Error('malformed append reply');
    return items.map((item, n) => {
      const reply = decode('append', raw.slice(2 * n, 2 * n + 2));
      if (reply.refused) return new LeaseLostError(item.attempt.runId);
      return reply.outcome === 'Duplicate' ? 'duplicate' : 'applied';
    });
  }

  /** The next attempt after a transient failure; returns when it is due. */
  async retry(attempt: Attempt, o: { delayMs: number; lastError: string }): Promise<number> {
    const reply = await this.call('retry', attempt.scope, this.leaseKeys(attempt), {
      runId: attempt.runId, fence: attempt.fence, delayMs: Math.round(o.delayMs), lastError: o.lastError,
    });
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    await this.dispatch(attempt.scope, reply.orders);
    return reply.retryAt;
  }

  /** Blocks the run on a non-idempotent step whose outcome is unknown. */
  async block(attempt: Attempt, blocked: { stepKey: string; reason: string; since: number }): Promise<void> {
    const reply = await this.call('block', attempt.scope, this.slotKeys(attempt.keys, attempt.runId), {
      runId: attempt.runId, fence: attempt.fence, blocked: JSON.stringify(blocked),
    });
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    await this.dispatch(attempt.scope, reply.orders);
  }

  /** Ends the run (and commits its turn to the built-in history, once). */
  /** Ends the run (lua/finish.lua); `notDelivered`: steering messages it left, each now the session's next turn. */
  async finish(
    attempt: Attempt, f: FinishInput, last?: { no: number; events: readonly (readonly [string, string])[] },
  ): Promise<{ notDelivered: number }> {
    const reply = await this.call('finish', attempt.scope, {
      ...this.slotKeys(attempt.keys, attempt.runId), messages: attempt.keys.messages(attempt.sessionId),
    }, { runId: attempt.runId, fence: attempt.fence, ...f, ...(last ? { batch: last.no } : {}) }, last ? last.events.flat() : []);
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    await this.dispatch(attempt.scope, reply.orders);
    return { notDelivered: reply.notDelivered || 0 };
  }

  /** Hands the run over at shutdown: its lease ends now and another worker takes it at once. */
  async release(attempt: Attempt): Promise<void> {
    const reply = await this.call('release', attempt.scope, this.leaseKeys(attempt), { runId: attempt.runId, fence: attempt.fence });
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    await this.dispatch(attempt.scope, reply.orders);
  }

  /**
   * Parks the run on the waits its attempt reached: status waiting, lease and scope slot
   * released, the session kept. See lua/wait.lua for waits answered meanwhile.
   */
  async wait(attempt: Attempt, waits: readonly WaitRequest[]): Promise<ParkReply> {
    const timeouts: Record<string, number> = {};
    const untils: Record<string, number> = {};
    const tokens: Record<string, string> = {};
    const specs: string[] = [];
    for (const w of waits) {
      if (w.timeoutMs !== undefined) timeouts[w.key] = w.timeoutMs;
      if (w.untilMs !== undefined) untils[w.key] = w.untilMs;
      if (w.tokenHash !== undefined) tokens[w.key] = w.tokenHash;
      specs.push(JSON.stringify({ key: w.key, kind: w.kind, name: w.name, prompt: w.prompt, schema: w.schema }));
    }
    const reply = await this.call('wait', attempt.scope, {
      ...this.slotKeys(attempt.keys, attempt.runId), steps: attempt.keys.steps(attempt.runId), waits: attempt.keys.waits(attempt.runId),
    }, { runId: attempt.runId, fence: attempt.fence, timeouts, untils, tokens }, specs);
    if (reply.refused) throw scriptError(reply.refused, attempt.runId);
    if (reply.code === Outcome.wait.CancelRequested) {
      return { cancelRequested: true, answered: [], nextAt: undefined, admittedAgain: false };
    }
    await this.dispatch(attempt.scope, reply.orders);
    return { cancelRequested: false, answered: reply.answered, nextAt: reply.nextAt, admittedAgain: reply.admittedAgain };
  }

  /**
   * Resumes a pending wait with `value` (JSON text, already checked against its schema), once.
   * With `tokenHash` (the token route) the wait must hold that token. Throws WAIT_NOT_PENDING.
   */
  async resumeWait(scope: string, runId: string, waitKey: string, o: { value: string; tokenHash?: string }): Promise<ResumedWait> {
    const reply = await this.call('resume', scope, this.waitKeys(scope, runId), { runId, waitKey, value: o.value, tokenHash: o.tokenHash });
    if (reply.refused) throw scriptError(reply.refused, runId);
    await this.dispatch(scope, reply.orders);
    return { kind: reply.kind as WaitKind, since: reply.since, runtime: reply.runtime, agent: reply.agent };
  }

  // ---- sweeper ----

  /** A run's earliest wait deadline passed: outcomes for the waits due, a waiting run goes on. */
  async waitTimeout(scope: string, runId: string): Promise<{ answered: AnsweredWait[]; runtime: string; agent: string }> {
    const reply = await this.call('wait-timeout', scope, this.waitKeys(scope, runId), { runId });
    if (reply.refused) throw scriptError(reply.refused, runId);
    await this.dispatch(scope, reply.orders);
    return { answered: reply.answered, runtime: reply.runtime, agent: reply.agent };
  }

  /** A scheduled run is due: it joins its session. Returns whether it did now. */
  async runDue(scope: string, runId: string): Promise<boolean> {
    const reply = await this.call('due', scope, this.slotKeys(this.keys.scope(scope), runId), { runId });
    if (reply.refused) throw scriptError(reply.refused, runId);
    await this.dispatch(scope, reply.orders);
    return reply.joined;
  }

  /** Gives the scope's free slots to its parked session heads. Returns whether it dispatched any. */
  async fill(scope: string): Promise<boolean> {
    const reply = await this.call('fill', scope, this.slotKeys(this.keys.scope(scope)), { batch: FILL_BATCH });
    if (reply.refused) throw new Error(`the fill script answered the unexpected code ${reply.refused.code}`);
    return this.dispatch(scope, reply.orders);
  }

  /**
   * Takes the bytes of expired runs and forks off the scope's stored bytes (lua/storage.lua), up
   * to 100 ledger entries per call. Returns the count, and whether more entries may be due.
   */
  async trimStorage(scope: string): Promise<{ stored: number; more: boolean }> {
    const reply = await this.call('storage', scope, { ledger: this.keys.scope(scope).storageLedger }, {});
    return { stored: reply.stored, more: reply.more };
  }

  /** A run's ttlMs passed: ends it `expired` unless it started. Returns the run when it expired now. */
  async expire(scope: string, runId: string): Promise<RunRecord | undefined> {
    const reply = await this.call('expire', scope, this.slotKeys(this.keys.scope(scope), runId), { runId });
    if (reply.refused || reply.code !== Outcome.expire.Ended) return undefined;
    await this.dispatch(scope, reply.orders);
    return reply.run;
  }

  /** A run's timeoutMs budget ended: fails it with TIMEOUT unless a worker runs it. Returns the run when it failed now. */
  async timeOut(scope: string, runId: string): Promise<RunRecord | undefined> {
    const reply = await this.call('timeout', scope, this.slotKeys(this.keys.scope(scope), runId), { runId });
    if (reply.refused || reply.code !== Outcome.timeout.Ended) return undefined;
    await this.dispatch(scope, reply.orders);
    return reply.run;
  }

  /**
   * A dispatched run (dispatch number `dispatch`) whose agent no live worker served for
   * AGENT_GRACE_MS fails with UNKNOWN_AGENT, unless it moved on since. Returns the run when it failed now.
   */
  async unserved(scope: string, runId: string, dispatch: number, message: string): Promise<RunRecord | undefined> {
    const reply = await this.call('unserved', scope, this.slotKeys(this.keys.scope(scope), runId), { runId, dispatch, message });
    if (reply.refused || reply.code !== Outcome.unserved.Ended) return undefined;
    await this.dispatch(scope, reply.orders);
    return reply.run;
  }

  /**
   * A run's score in the scope's `leases` passed: a running run whose lease ran out gets a job
   * whose claim takes it over; a dispatched or retrying one is dispatched again unless `job`
   * (its dispatch number's job, as the sweeper found it) is alive, and then only its deadline
   * moves. Returns whether it dispatched a job.
   */
  async repair(scope: string, runId: string, job?: { dispatch: number; alive: boolean }): Promise<boolean> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('repair', scope, { run: sk.run(runId), leases: sk.leases }, {
      runId, ...(job ? { dispatch: job.dispatch, jobAlive: job.alive } : {}),
    });
    if (reply.refused) throw scriptError(reply.refused, runId);
    return this.dispatch(scope, reply.orders);
  }

  // ---- provider rate limits ----

  /** One atomic step on the rate-limit bucket `bucket` (RATE_LIMITS), over a window of `windowMs`. */
  async rateBucket(bucket: string, windowMs: number, call: RateBucketCall): Promise<RateBucketReply> {
    const keys = {
      bucket: this.keys.rateBucket(bucket), grants: this.keys.rateGrants(bucket),
      tags: this.keys.rateTags(bucket), waiting: this.keys.rateWaiting(bucket), lapses: this.keys.rateLapses(bucket),
    };
    const raw = await callScript(this.redis, 'rate-bucket', keys, { json: JSON.stringify({ base: '', windowMs, ...call }) });
    switch (call.op) {
      case 'acquire': {
        const r = decodeAnswer('rate-bucket', raw, ['Granted', 'Waiting', 'TooLarge']);
        switch (r.outcome) {
          case 'Granted': return { kind: 'granted', member: r.member, at: r.at, requests: r.requests, tokens: r.tokens };
          case 'Waiting': return { kind: 'wait', waitMs: r.waitMs, why: r.why as RateWaitReason };
          default: return { kind: 'too-large', tpm: r.tpm };
        }
      }
      case 'settle': return { kind: 'settled' };
      case 'pause': {
        const r = decodeAnswer('rate-bucket', raw, ['Paused']);
        return { kind: 'paused', pausedUntil: r.pausedUntil, moved: r.moved };
      }
      case 'resume': return { kind: 'resumed', lifted: decodeAnswer('rate-bucket', raw, ['Resumed']).lifted };
      case 'read': {
        const r = decodeAnswer('rate-bucket', raw, ['Read']);
        return {
          kind: 'state', requests: r.requests, tokens: r.tokens, reserved: r.reserved, pausedUntil: r.pausedUntil,
          pausedBy: r.pausedBy, now: r.now, pausedAt: r.pausedAt, pauseAsked: r.pauseAsked,
          secondRequests: r.secondRequests, secondTokens: r.secondTokens, waiting: r.waiting, waitingCount: r.waitingCount,
        };
      }
    }
  }

  // ---- token budgets (budgets.ts) ----

  /** Checks a model call against its scope's daily token budget and, when it fits, holds its tokens until released. */
  async budgetHold(scope: string, call: BudgetHoldCall): Promise<BudgetHoldReply> {
    const sk = this.keys.scope(scope);
    const { day, ...options } = call;
    const keys = { limits: sk.limits, usage: sk.usage(day), holds: sk.budgetHolds(day) };
    const raw = await this.callRaw('budget-hold', scope, keys, options);
    const r = decodeAnswer('budget-hold', raw);
    switch (r.outcome) {
      case 'Held': return { kind: 'held', used: r.used, held: r.held, limit: r.limit, reserved: r.reserved };
      case 'Refused': return { kind: 'refused', used: r.used, held: r.held, limit: r.limit };
      case 'Malformed': return { kind: 'malformed', field: r.field };
      default: return { kind: 'none' };
    }
  }

  /** Lets a hold go once its call's tokens are counted (or it made none). */
  async budgetRelease(scope: string, day: string, hold: string): Promise<void> {
    await this.redis.zrem(this.keys.scope(scope).budgetHolds(day), hold);
  }

  // ---- cron schedules (src/lib/schedules) ----

  /** Pauses a schedule: out of the due index; a tick it claimed already still makes its run. */
  async pauseSchedule(scope: string, id: string): Promise<'paused' | 'not-found'> {
    const reply = await this.call('schedule-pause', scope, this.scheduleKeys(scope, id), { id });
    return reply.refused ? notFound('schedule-pause', reply.refused) : 'paused';
  }

  /** Resumes a schedule from `nextAt`, its first tick after now (undefined: it has none left). */
  async resumeSchedule(scope: string, id: string, nextAt: number | undefined): Promise<'active' | 'not-found'> {
    const reply = await this.call('schedule-resume', scope, this.scheduleKeys(scope, id), { id, nextAt });
    return reply.refused ? notFound('schedule-resume', reply.refused) : 'active';
  }

  /** Claims a schedule's due tick, once among racing processes. Returns whether this call claimed it. */
  async claimTick(scope: string, id: string, t: TickClaim): Promise<boolean> {
    const reply = await this.call('schedule-claim', scope, this.scheduleKeys(scope, id), { id, ...t });
    if (reply.refused) throw new Error(`the schedule-claim script answered the unexpected code ${reply.refused.code}`);
    return reply.code === Outcome.scheduleClaim.Claimed;
  }

  /** Marks a claimed tick done with its outcome, once. Returns whether this call did (the tick was pending). */
  async tickDone(scope: string, id: string, tick: number, outcome: TickOutcome): Promise<boolean> {
    const reply = await this.call('schedule-done', scope, this.scheduleKeys(scope, id), 'runId' in outcome
      ? { id, tick, runId: outcome.runId }
      : { id, tick, refusal: JSON.stringify({ tick, ...outcome.refused }) });
    if (reply.refused) throw new Error(`the schedule-done script answered the unexpected code ${reply.refused.code}`);
    return reply.code === Outcome.scheduleDone.Done;
  }

  // ---- bulk operations (bulk-operations.ts) ----

  /** Makes an operation (its hash's fields as given) unless its scope runs `maxRunning` already. */
  async createOperation(
    scope: string, id: string, fields: Record<string, string>, o: { maxRunning: number; now: number },
  ): Promise<'created' | 'at-cap'> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('bulk-create', scope, {
      operation: sk.operation(id), operations: sk.operations, active: sk.operationsActive,
    }, { id, fields, ...o });
    if (reply.refused) throw new Error(`the bulk-create script answered the unexpected code ${reply.refused.code}`);
    return reply.code === Outcome.bulkCreate.Created ? 'created' : 'at-cap';
  }

  /** Stops a running operation (an ended one stays as it is); kept readable for `retentionMs`. */
  async cancelOperation(scope: string, id: string, o: { now: number; retentionMs: number }): Promise<'stopped' | 'not-found'> {
    const reply = await this.call('bulk-cancel', scope, this.operationKeys(scope, id), { id, ...o });
    return reply.refused ? notFound('bulk-cancel', reply.refused) : 'stopped';
  }

  /** Takes an operation's next batch under the lease `token`; returns the cursor it starts after, undefined when not now. */
  async claimBatch(scope: string, id: string, o: { token: string; now: number; leaseMs: number }): Promise<string | undefined> {
    const reply = await this.call('bulk-claim', scope, this.operationKeys(scope, id), { id, ...o });
    if (reply.refused) throw new Error(`the bulk-claim script answered the unexpected code ${reply.refused.code}`);
    return reply.code === Outcome.bulkClaim.Claimed ? reply.cursor : undefined;
  }

  /** Counts a batch, if its lease is still the caller's. Returns whether it was. */
  async commitBatch(scope: string, id: string, c: BatchCommit): Promise<boolean> {
    const { lastError, ...counts } = c;
    const reply = await this.call('bulk-commit', scope, this.operationKeys(scope, id), {
      id, ...counts, lastError: lastError && JSON.stringify(lastError),
    });
    if (reply.refused) throw new Error(`the bulk-commit script answered the unexpected code ${reply.refused.code}`);
    return reply.code === Outcome.bulkCommit.Committed;
  }

  // ----

  /** The keys of a run and of its scope's slot bookkeeping, which most transitions touch. */
  private slotKeys(sk: ScopeKeys, runId?: string): NamedKeys {
    return {
      run: runId === undefined ? undefined : sk.run(runId), meta: sk.meta, ready: sk.ready, leases: sk.leases,
      timers: sk.timers,
    };
  }

  /** The keys of a fork from one session into another (lua/fork.lua, lua/fork-copy.lua). */
  private forkKeys(scope: string, from: string, to: string): NamedKeys {
    const sk = this.keys.scope(scope);
    return {
      from: sk.messages(from), to: sk.messages(to), toSession: sk.session(to), toQueue: sk.sessionQueue(to), toRuns: sk.sessionRuns(to),
      state: sk.forkState(to), staging: sk.forkCopy(to), bucket: sk.forkBucket,
    };
  }

  private waitKeys(scope: string, runId: string): NamedKeys {
    const sk = this.keys.scope(scope);
    return { ...this.slotKeys(sk, runId), steps: sk.steps(runId), waits: sk.waits(runId) };
  }

  private scheduleKeys(scope: string, id: string): NamedKeys {
    const sk = this.keys.scope(scope);
    return { schedule: sk.schedule(id), due: sk.schedulesDue };
  }

  private operationKeys(scope: string, id: string): NamedKeys {
    const sk = this.keys.scope(scope);
    return { operation: sk.operation(id), active: sk.operationsActive };
  }

  private leaseKeys(a: Attempt): NamedKeys {
    return { run: a.runKey, leases: a.keys.leases };
  }

  /** Calls a script and decodes its reply. */
  private async call<N extends Replied & ScriptName>(
    name: N, scope: string, keys: NamedKeys, options: Record<string, unknown>, payload?: readonly (string | number)[],
  ): Promise<Reply<N>> {
    return decode(name, await this.callRaw(name, scope, keys, options, payload));
  }

  /** Calls a script; its reply still to decode (claim's has two shapes). */
  private async callRaw(
    name: ScriptName, scope: string, keys: NamedKeys, options: Record<string, unknown>, payload?: readonly (string | number)[],
  ): Promise<unknown> {
    const base = this.keys.scope(scope).base;
    const acks = this.acks;
    if (!acks) return callScript(this.redis, name, keys, this.options(base, options), payload);
    // With replica acknowledgements, a call's notifications come back with its reply (lua/lib/events.lua's
    // withDeferred) and are published only once replicas hold what they announce.
    const mark = acks.mark();
    const raw = await callScript(this.redis, name, keys, this.options(base, { ...options, deferPublish: true }), payload);
    const { reply, messages } = deferredOf(raw);
    if (messages.length > 0 || REPLICATED.has(name)) await acks.confirm(mark);
    if (messages.length > 0) {
      const channel = this.keys.scope(scope).live;
      await Promise.all(messages.map((m) => this.redis.publish(channel, m)));
    }
    return reply;
  }

  /** The options argument: shared limits, the scope base and the call's own fields, one JSON object. */
  private options(base: string, own: Record<string, unknown>): OptionsJson {
    return { json: JSON.stringify({ ...this.limits, ...this.fairLevel(), base, ...own }) };
  }

  /** Adds the BullMQ jobs a transition asked for (dispatch orders, JSON text); returns whether there were any. */
  private async dispatch(scope: string, orders: string): Promise<boolean> {
    // Lua's cjson encodes an empty list as `{}`.
    if (orders === '[]' || orders === '{}') return false;
    await this.dispatcher.dispatch(scope, orders);
    return true;
  }
}

/** A reply as withDeferred (lua/lib/events.lua) hands it back: the script's own, and the notifications it held. */
function deferredOf(raw: unknown): { reply: unknown; messages: string[] } {
  if (Array.isArray(raw) && raw[0] === 'baton:deferred') return { reply: raw[1], messages: raw.slice(2).map(String) };
  return { reply: raw, messages: [] };
}

/** Keys rejoining the turns, and runs of an earlier version's list admitted, per fill call. */
const FILL_BATCH = 500;

/**
 * How long a fork's state and partial copy outlive its last chunk (lua/fork.lua): chunks follow
 * one another a round trip apart, so 15 s is past any pause of a live process, and a fork whose
 * process died is gone (nothing of it readable, its target free again) that long after.
 */
export const FORK_LEASE_MS = 15_000;

/** Runs renewed by one heartbeat script call: a few hundred record reads keep Redis busy well under a millisecond. */
const HEARTBEAT_BATCH = 200;

/** One run's code in a heartbeat's reply (a list of codes, one per run). */
function heartbeatReply(code: unknown): HeartbeatReply {
  const reply = decode('heartbeat', [code]);
  if (reply.refused) return reply.refused.code === ScriptCode.NotRunnable ? { kind: 'closed' } : { kind: 'lost' };
  return { kind: 'renewed', cancelRequested: reply.outcome === 'CancelRequested' };
}

/** The refusal of a script whose only one is NOT_FOUND (a schedule's or an operation's hash is gone). */
function notFound(name: ScriptName, refusal: Refusal): 'not-found' {
  if (refusal.code === ScriptCode.NotFound) return 'not-found';
  throw new Error(`the ${name} script answered the unexpected code ${refusal.code}`);
}

/** A cancel's outcome code, by name. */
function cancelOutcome(code: number): CancelReply['outcome'] {
  switch (code) {
    case Outcome.cancel.AlreadyFinished: return 'already-finished';
    case Outcome.cancel.Cancelled: return 'cancelled';
    case Outcome.cancel.Requested: return 'requested';
    default: throw new Error(`the cancel script answered the unexpected code ${code}`);
  }
}
