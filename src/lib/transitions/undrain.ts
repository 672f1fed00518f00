import { slotKeys, type ScriptCaller } from './caller.ts';
import { num, orders, type Replies } from './reply.ts';

export const REPLY = { '': { resumed: num, left: num, orders } } satisfies Replies;

/** One batch of a resume (undrain.lua): `first` lifts the flag; parked heads are admitted in order. */
export async function undrain(
  c: ScriptCaller, scope: string, runtime: string, o: { first: boolean; batch: number },
): Promise<{ resumed: number; left: number }> {
  const sk = c.keys.scope(scope);
  const reply = await c.call('undrain', REPLY, scope, { drain: sk.drain(runtime), held: sk.held(runtime), ...slotKeys(sk) }, o);
  await c.dispatch(scope, reply.orders);
  return { resumed: reply.resumed, left: reply.left };
}
