import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, unexpected, type Replies } from './reply.ts';

export const REPLY = { Filled: { orders } } satisfies Replies;

/** Keys rejoining the turns, and runs of an earlier version's list admitted, per fill call. */
const FILL_BATCH = 500;

/** Gives the scope's free slots to its parked session heads (fill.lua). Returns whether it dispatched any. */
export async function fill(c: ScriptCaller, scope: string): Promise<boolean> {
  const reply = await c.call('fill', REPLY, scope, slotKeys(c.keys.scope(scope)), { batch: FILL_BATCH });
  if (reply.refused) return unexpected('fill', reply.refused);
  return c.dispatch(scope, reply.orders);
}
