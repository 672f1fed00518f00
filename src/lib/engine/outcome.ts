import type { Config } from '../config/index.ts';
import type { Logger } from '../logger.ts';
import { RunAbort } from '../transitions/attempt.ts';
import type { RunError, RunRecord, RunResult } from '../transitions/record.ts';
import { backoffMs, classify } from '../sdk/retry-policy.ts';
import { LeaseLostError } from '../transitions/script-codes.ts';
import { isRedisUnavailable } from '../redis/redis.ts';
import type { WaitRequest } from '../transitions/wait.ts';

/** An answer as the agent gave it: the closer adds the tool calls and usage the attempt counted. */
export type Answer = Omit<RunResult, 'toolCallsSeen'> & { toolCallsSeen?: number };

/** What stopped an attempt from outside its agent, each with a closing of its own. */
export type Stop = 'cancelled' | 'timeout' | 'run-limit' | 'shutdown';

/**
 * How an attempt ended. Every path through an attempt yields one of these, and closeAttempt
 * (close.ts) turns it into at most one closing transition:
 *
 * - succeeded: finish.lua, status succeeded, with the turn;
 * - failed: finish.lua, status failed (`result` absent: the text streamed so far);
 * - retrying: retry.lua, the next attempt due after `delayMs`;
 * - blocked: block.lua, a non-idempotent step started by an earlier attempt has no result;
 * - parked: wait.lua, the agent waits on these waits and nothing else;
 * - aborted: a cancel (finish.lua, cancelled), timeoutMs or MAX_RUN_MS running out
 *   (finish.lua, failed) or the worker's shutdown (release.lua, handed over);
 * - broken: something of Baton's threw on the way (a transition refused a value, a bug):
 *   finish.lua, failed with CLOSE_FAILED, so the run is not recovered into the same throw.
 *
 * The Unclosed kinds issue no transition at all: nothing the attempt writes would land (or it
 * would leave a hole before `end`), so the lease runs out and the run is taken over, at most
 * MAX_RECOVERIES times. They are made where they happen: the agent's part (a fenced write the
 * agent made was refused, the signal aborted for a lost lease) or a write of the closing.
 */
export type AttemptOutcome =
  | { kind: 'succeeded'; result: Answer }
  | { kind: 'failed'; error: RunError; result?: Answer }
  | { kind: 'retrying'; error: RunError; delayMs: number }
  | { kind: 'blocked'; stepKey: string }
  | { kind: 'parked'; waits: WaitRequest[] }
  | { kind: 'aborted'; reason: Stop }
  | { kind: 'broken'; error: string }
  | Unclosed;

/**
 * An attempt that ends without closing its run:
 * - lease-lost: another worker holds the run (or this attempt already gave it up);
 * - redis-lost: Redis was out of reach (or refused writes) when the attempt closed;
 * - events-unwritten: its events could not be written before the closing, for LEASE_MS.
 */
export type Unclosed =
  | { kind: 'lease-lost' }
  | { kind: 'redis-lost'; error: string }
  | { kind: 'events-unwritten'; error: string };

/** The outcome a write of the closing makes of what it threw: unclosed, or broken. */
export function writeFailure(err: unknown): Unclosed | { kind: 'broken'; error: string } {
  if (err instanceof LeaseLostError) return { kind: 'lease-lost' };
  if (isRedisUnavailable(err)) return { kind: 'redis-lost', error: errorText(err) };
  return { kind: 'broken', error: errorText(err) };
}

/** A thrown value as text, whatever it is (an agent may throw anything). */
export function errorText(err: unknown): string {
  try {
    return String((err as Error | undefined)?.message ?? err);
  } catch {
    return 'an unreadable value';
  }
}

/**
 * The outcome of an error thrown by the agent (or by what runs for it: its memory store,
 * its input artifacts, its answer's checks): retrying when the error is transient and
 * attempts are left, failed otherwise. Never throws (see classify).
 */
export function failureOutcome(
  err: unknown, run: RunRecord, config: Pick<Config, 'RETRY_BASE_MS' | 'RETRY_MAX_MS'>, log: Logger,
): AttemptOutcome {
  const cls = classify(err);
  const error: RunError = { code: cls.code, message: cls.message.slice(0, 2000) };
  // Details come from the agent's error (`errors` of a PermanentError): kept only when they are JSON.
  if (cls.kind === 'permanent' && cls.details !== undefined && jsonOrUndefined(cls.details) !== undefined) {
    error.details = cls.details;
  }
  log.warn({ err: error, kind: cls.kind, attempt: run.attempt }, 'attempt failed');
  if (cls.kind === 'transient' && run.attempt < run.maxAttempts) {
    return { kind: 'retrying', error, delayMs: backoffMs(run.attempt, config.RETRY_BASE_MS, config.RETRY_MAX_MS, cls.retryAfterMs) };
  }
  return { kind: 'failed', error };
}

/**
 * The outcome of an attempt whose signal aborted. A lost lease is lease-lost: the attempt no
 * longer holds the run. So is an attempt that parked or blocked already (its closing
 * transition gave the lease up): nothing it still does is anybody's outcome.
 */
export function abortOutcome(reason: unknown): AttemptOutcome {
  // Anything but a RunAbort (an abort Baton did not make) reads as a cancel.
  const why = reason instanceof RunAbort ? reason.reason : 'cancelled';
  switch (why) {
    case 'cancelled':
    case 'timeout':
    case 'run-limit':
    case 'shutdown':
      return { kind: 'aborted', reason: why };
    case 'lease-lost':
    case 'waiting':
    case 'blocked':
      return { kind: 'lease-lost' };
  }
}

/** An error an agent threw (or a refused write it made), or the abort that stopped it: the outcome of either. */
export function thrownOutcome(
  err: unknown, signal: AbortSignal, run: RunRecord, config: Pick<Config, 'RETRY_BASE_MS' | 'RETRY_MAX_MS'>, log: Logger,
): AttemptOutcome {
  // A fenced write the agent made (a step, its events) found the run taken over.
  if (err instanceof LeaseLostError) return { kind: 'lease-lost' };
  // Once stopped, what the agent throws is the stop's doing (an AbortError, a rejected wait).
  if (signal.aborted) return abortOutcome(signal.reason);
  return failureOutcome(err, run, config, log);
}

function jsonOrUndefined(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
}
