import type { ScriptCaller } from './caller.ts';
import { unexpected, type Replies } from './reply.ts';
import { scheduleKeys } from './schedule-pause.ts';
import { Outcome } from './script-codes.ts';

/** What became of a claimed tick: its run, or the submit's refusal (the scope's state, not Redis's). */
export type TickOutcome = { runId: string } | { refused: { code: string; message: string } };

export const REPLY = { Done: {}, NotPending: {} } satisfies Replies;

/** Marks a claimed tick done with its outcome, once (schedule-done.lua). Returns whether this call did (the tick was pending). */
export async function tickDone(c: ScriptCaller, scope: string, id: string, tick: number, outcome: TickOutcome): Promise<boolean> {
  const reply = await c.call('schedule-done', REPLY, scope, scheduleKeys(c, scope, id), 'runId' in outcome
    ? { id, tick, runId: outcome.runId }
    : { id, tick, refusal: JSON.stringify({ tick, ...outcome.refused }) });
  if (reply.refused) return unexpected('schedule-done', reply.refused);
  return reply.code === Outcome.scheduleDone.Done;
}
