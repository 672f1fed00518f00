import type { Attempt } from './attempt.ts';
import type { ScriptCaller } from './caller.ts';
import { text, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

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

export const REPLY = { Recorded: { result: text }, LeaseLost: {} } satisfies Replies;

/**
 * Records a memoized step's start marker or its result (step.lua); returns the stored result
 * (first writer wins). A result's usage is counted, for the run and the scope's day, only by
 * the write that stores it.
 */
export async function step(c: ScriptCaller, attempt: Attempt, write: StepWrite): Promise<string> {
  const usage = write.op === 'done' ? write.usage : undefined;
  const day = usage && new Date(usage.at).toISOString().slice(0, 10);
  const reply = await c.call('step', REPLY, attempt.scope, {
    run: attempt.runKey, steps: attempt.keys.steps(attempt.runId), usage: day && attempt.keys.usage(day),
  }, usage
    ? {
      fence: attempt.fence, ...write, usage: { agent: usage.agent, calls: usage.calls },
      usageTtlMs: USAGE_RETENTION_DAYS * 86_400_000, usageRows: c.config.USAGE_ROWS_PER_DAY,
    }
    : { fence: attempt.fence, ...write });
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  return reply.result;
}
