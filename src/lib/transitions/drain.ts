import { slotKeys, type ScriptCaller } from './caller.ts';
import { num, orders, type Replies } from './reply.ts';

export const REPLY = { '': { cancelled: num, left: num, orders } } satisfies Replies;

/** One batch of a drain (drain.lua): sets the flag; with cancelQueued, cancels up to `batch` waiting runs. */
export async function drain(
  c: ScriptCaller, scope: string, runtime: string, o: { cancelQueued: boolean; batch: number },
): Promise<{ cancelled: number; left: number }> {
  const sk = c.keys.scope(scope);
  const reply = await c.call('drain', REPLY, scope, {
    drain: sk.drain(runtime), waiting: sk.waiting(runtime), held: sk.held(runtime), ...slotKeys(sk),
  }, { runtime, ...o });
  // Cancelling a session head hands its scope slot on, possibly to another runtime's run.
  await c.dispatch(scope, reply.orders);
  return { cancelled: reply.cancelled, left: reply.left };
}
