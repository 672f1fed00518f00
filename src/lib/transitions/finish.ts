import type { Attempt } from './attempt.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { num, orders, type Replies } from './reply.ts';
import { LOST, ScriptCode, scriptError, type Fenced } from './script-codes.ts';

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

export const REPLY = { Finished: { orders, notDelivered: num }, LeaseLost: {} } satisfies Replies;

/**
 * Ends the run (finish.lua; and commits its turn to the built-in history, once), with the
 * attempt's last events; `notDelivered`: steering messages it left, each now the session's next turn.
 */
export async function finish(
  c: ScriptCaller, attempt: Attempt, f: FinishInput, last?: { no: number; events: readonly (readonly [string, string])[] },
): Promise<Fenced<{ notDelivered: number }>> {
  const reply = await c.call('finish', REPLY, attempt.scope, {
    ...slotKeys(attempt.keys, attempt.runId), messages: attempt.keys.messages(attempt.sessionId),
  }, { runId: attempt.runId, fence: attempt.fence, ...f, ...(last ? { batch: last.no } : {}) }, last ? last.events.flat() : []);
  if (reply.refused?.code === ScriptCode.LeaseLost) return LOST;
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  await c.dispatch(attempt.scope, reply.orders);
  return { kind: 'written', value: { notDelivered: reply.notDelivered || 0 } };
}
