import type { RunRecord } from './record.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, record, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

/** The run left as it was, or ended now. */
export const REPLY = { Unchanged: {}, Ended: { orders, run: record } } satisfies Replies;

/** A run's timeoutMs budget ended (timeout.lua): fails it with TIMEOUT unless a worker runs it. Returns the run when it failed now. */
export async function timeOut(c: ScriptCaller, scope: string, runId: string): Promise<RunRecord | undefined> {
  const reply = await c.call('timeout', REPLY, scope, slotKeys(c.keys.scope(scope), runId), { runId });
  if (reply.refused || reply.code !== Outcome.timeout.Ended) return undefined;
  await c.dispatch(scope, reply.orders);
  return reply.run;
}
