import { slotKeys, type ScriptCaller } from './caller.ts';
import { flag, orders, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

export const REPLY = { Checked: { orders, joined: flag } } satisfies Replies;

/** A scheduled run is due (due.lua): it joins its session. Returns whether it did now. */
export async function runDue(c: ScriptCaller, scope: string, runId: string): Promise<boolean> {
  const reply = await c.call('due', REPLY, scope, slotKeys(c.keys.scope(scope), runId), { runId });
  if (reply.refused) throw scriptError(reply.refused, runId);
  await c.dispatch(scope, reply.orders);
  return reply.joined;
}
