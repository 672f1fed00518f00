import type { Config } from '../config/index.ts';
import type { Logger } from '../logger.ts';
import { RunAbort } from './attempt.ts';
import type { RunError, RunRecord, RunResult } from './record.ts';
import { backoffMs, classify } from './retry-policy.ts';
import { LeaseLostError } from './script-codes.ts';
import type { WaitRequest } from './transitions.ts';

/** An answer as the agent gave it: the closer adds the tool calls and usage the attempt counted. */
export type Answer = Omit<RunResult, 'toolCallsSeen'> & { toolCallsSeen?: number };

/** What stopped an attempt from outside its agent, each with a closing of its own. */
export type Stop = 'cancelled' | 'timeout' | 'run-limit' | 'shutdown';

/**
 * How the agent's part of an attempt ended. Every path through an attempt yields one of
 * these, and closeAttempt (close.ts) turns it into exactly one closing transition:
 *
 * - succeeded: finish.lua, status succeeded, with the turn;
 * - failed: finish.lua, status failed (`result` absent: the text streamed so far);
 * - retrying: retry.lua, the next attempt due after `delayMs`;
 * - blocked: block.lua, a non-idempotent step started by an earlier attempt has no result;
 * - parked: wait.lua, the agent waits on these waits and nothing else;
 * - aborted: a cancel (finish.lua, cancelled), timeoutMs or MAX_RUN_MS running out
 *   (finish.lua, failed) or the worker's shutdown (release.lua, handed over).
 *
 * A lost lease is no outcome: nothing the attempt writes would land, so it is thrown
 * (LeaseLostError) and caught once, by the executor.
 */
export type AttemptOutcome =
  | { kind: 'succeeded'; result: Answer }
  | { kind: 'failed'; error: RunError; result?: Answer }
  | { kind: 'retrying'; error: RunError; delayMs: number }
  | { kind: 'blocked'; stepKey: string }
  | { kind: 'parked'; waits: WaitRequest[] }
  | { kind: 'aborted'; reason: Stop };

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
 * The outcome of an attempt whose signal aborted. A lost lease throws LeaseLostError: the
 * attempt no longer holds the run. So does an attempt that parked or blocked already (its
 * closing transition gave the lease up): nothing it still does is anybody's outcome.
 */
export function abortOutcome(reason: unknown, runId: string): AttemptOutcome {
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
      throw new LeaseLostError(runId);
  }
}

/** An error an agent threw, or the abort that stopped it: the outcome of either. */
export function thrownOutcome(
  err: unknown, signal: AbortSignal, run: RunRecord, config: Pick<Config, 'RETRY_BASE_MS' | 'RETRY_MAX_MS'>, log: Logger,
): AttemptOutcome {
  if (err instanceof LeaseLostError) throw err;
  // Once stopped, what the agent throws is the stop's doing (an AbortError, a rejected wait).
  if (signal.aborted) return abortOutcome(signal.reason, run.id);
  return failureOutcome(err, run, config, log);
}

function jsonOrUndefined(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
}
