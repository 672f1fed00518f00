import type { RunRecord } from './record.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, record, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

/** The run left as it was, or ended now. */
export const REPLY = { Unchanged: {}, Ended: { orders, run: record } } satisfies Replies;

/**
 * A dispatched run (dispatch number `dispatch`) whose agent no live worker served for
 * AGENT_GRACE_MS fails with UNKNOWN_AGENT (unserved.lua), unless it moved on since. Returns the run when it failed now.
 */
export async function unserved(
  c: ScriptCaller, scope: string, runId: string, dispatch: number, message: string,
): Promise<RunRecord | undefined> {
  const reply = await c.call('unserved', REPLY, scope, slotKeys(c.keys.scope(scope), runId), { runId, dispatch, message });
  if (reply.refused || reply.code !== Outcome.unserved.Ended) return undefined;
  await c.dispatch(scope, reply.orders);
  return reply.run;
}
