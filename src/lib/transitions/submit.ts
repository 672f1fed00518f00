import { newRunPairs, RERUNS_KEPT, type NewRunRecord, type RunRecord } from './record.ts';
import { slotKeys, type ScriptCaller, UNDECODED } from './caller.ts';
import { decode, flag, num, orders, record, text, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

/** Accepts a run (submit.lua): the one door every submit goes through (engine/submissions.ts). */

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

export type SubmitReply = {
  created: boolean; runId: string; run: RunRecord | undefined;
  /** A steering message that went to the active run `runId` (no run made): as stored, and whether this submit sent it. */
  steered?: { message: StoredSteering; sent: boolean };
};

/** A steering message as the session's `steering` hash holds it (submit.lua). */
export interface StoredSteering {
  id: string; runId: string; state: 'pending' | 'delivered' | 'not-delivered' | 'turn';
  content: string; step?: number; reason?: string; turnRunId?: string;
}

export const REPLY = {
  Submitted: { runId: text, created: flag, orders, run: record },
  /** A steering message the active run got: no run made. */
  Steered: { runId: text, message: text, sent: flag },
  SessionBusy: {}, Draining: {}, NotFound: {}, IdempotencyMismatch: {},
  RateLimited: { value: num }, HistoryFull: { value: num }, QueuedRunsLimit: { value: num },
  StorageLimit: { value: num, retryAfterMs: num },
} satisfies Replies;

export async function submit(c: ScriptCaller, r: NewRun): Promise<SubmitReply> {
  const run = r.record;
  const sk = c.keys.scope(run.scope);
  const rerunOf = r.rerun ? run.rerunOf : undefined;
  if (r.rerun && rerunOf === undefined) throw new Error('a re-run\'s record names the run it repeats (rerunOf)');
  const raw = await c.call('submit', UNDECODED, run.scope, {
    ...slotKeys(sk, run.id), runs: sk.runs, session: sk.session(run.sessionId),
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
    historyMax: c.config.HISTORY_MAX_BYTES, turnBytes: r.turnBytes,
    ...(r.rerun ? { copySteps: r.rerun.copySteps, rerunsKept: RERUNS_KEPT } : {}),
    ...(r.warnings?.length ? { warnings: r.warnings } : {}),
    ...(r.steering ? { message: r.steering } : {}),
    // The record crosses once, as name/value pairs beside the options (submit.lua reads it
    // at its top): raw text, so a large input costs Redis no JSON decoding.
  }, newRunPairs(run));
  const reply = decode('submit', REPLY, raw);
  if (reply.refused) throw scriptError(reply.refused, run.id);
  if (reply.outcome === 'Steered') {
    const message = JSON.parse(reply.message) as StoredSteering;
    return { runId: reply.runId, created: false, run: undefined, steered: { message, sent: reply.sent } };
  }
  await c.dispatch(run.scope, reply.orders);
  // An idempotent repeat whose run has passed its retention comes back without a record.
  return { runId: reply.runId, created: reply.created, run: reply.run };
}
