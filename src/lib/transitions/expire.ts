import type { RunRecord } from './record.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, record, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

/** The run left as it was, or ended now. */
export const REPLY = { Unchanged: {}, Ended: { orders, run: record } } satisfies Replies;

/** A run's ttlMs passed (expire.lua): ends it `expired` unless it started. Returns the run when it expired now. */
export async function expire(c: ScriptCaller, scope: string, runId: string): Promise<RunRecord | undefined> {
  const reply = await c.call('expire', REPLY, scope, slotKeys(c.keys.scope(scope), runId), { runId });
  if (reply.refused || reply.code !== Outcome.expire.Ended) return undefined;
  await c.dispatch(scope, reply.orders);
  return reply.run;
}
