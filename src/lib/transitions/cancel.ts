import type { RunRecord } from './record.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, record, type Replies } from './reply.ts';
import { Outcome, scriptError } from './script-codes.ts';

export type CancelReply = { outcome: 'already-finished' | 'cancelled' | 'requested'; run: RunRecord | undefined };

export const REPLY = {
  AlreadyFinished: { orders, run: record }, Cancelled: { orders, run: record }, Requested: { orders, run: record }, NotFound: {},
} satisfies Replies;

/** Cancels a run (cancel.lua): ends one no worker holds, else asks its worker to stop. */
export async function cancel(c: ScriptCaller, scope: string, runId: string): Promise<CancelReply> {
  const reply = await c.call('cancel', REPLY, scope, slotKeys(c.keys.scope(scope), runId), { runId });
  if (reply.refused) throw scriptError(reply.refused, runId);
  await c.dispatch(scope, reply.orders);
  return { outcome: cancelOutcome(reply.code), run: reply.run };
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
