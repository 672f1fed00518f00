import type { Attempt } from './attempt.ts';
import { leaseKeys, type ScriptCaller } from './caller.ts';
import { num, orders, type Replies } from './reply.ts';
import { LOST, ScriptCode, scriptError, type Fenced } from './script-codes.ts';

export const REPLY = { Retrying: { retryAt: num, orders }, LeaseLost: {} } satisfies Replies;

/** The next attempt after a transient failure (retry.lua); answers when it is due, or that the lease is lost. */
export async function retry(c: ScriptCaller, attempt: Attempt, o: { delayMs: number; lastError: string }): Promise<Fenced<number>> {
  const reply = await c.call('retry', REPLY, attempt.scope, leaseKeys(attempt), {
    runId: attempt.runId, fence: attempt.fence, delayMs: Math.round(o.delayMs), lastError: o.lastError,
  });
  if (reply.refused?.code === ScriptCode.LeaseLost) return LOST;
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  await c.dispatch(attempt.scope, reply.orders);
  return { kind: 'written', value: reply.retryAt };
}
