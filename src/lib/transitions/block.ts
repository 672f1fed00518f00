import type { Attempt } from './attempt.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, type Replies } from './reply.ts';
import { LOST, ScriptCode, scriptError, type Fenced } from './script-codes.ts';

export const REPLY = { Blocked: { orders }, LeaseLost: {} } satisfies Replies;

/** Blocks the run on a non-idempotent step whose outcome is unknown (block.lua). */
export async function block(
  c: ScriptCaller, attempt: Attempt, blocked: { stepKey: string; reason: string; since: number },
): Promise<Fenced<void>> {
  const reply = await c.call('block', REPLY, attempt.scope, slotKeys(attempt.keys, attempt.runId), {
    runId: attempt.runId, fence: attempt.fence, blocked: JSON.stringify(blocked),
  });
  if (reply.refused?.code === ScriptCode.LeaseLost) return LOST;
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  await c.dispatch(attempt.scope, reply.orders);
  return { kind: 'written', value: undefined };
}
