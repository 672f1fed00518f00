import type { Attempt } from './attempt.ts';
import { leaseKeys, type ScriptCaller } from './caller.ts';
import { num, orders, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

export const REPLY = { Retrying: { retryAt: num, orders }, LeaseLost: {} } satisfies Replies;

/** The next attempt after a transient failure (retry.lua); returns when it is due. */
export async function retry(c: ScriptCaller, attempt: Attempt, o: { delayMs: number; lastError: string }): Promise<number> {
  const reply = await c.call('retry', REPLY, attempt.scope, leaseKeys(attempt), {
    runId: attempt.runId, fence: attempt.fence, delayMs: Math.round(o.delayMs), lastError: o.lastError,
  });
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  await c.dispatch(attempt.scope, reply.orders);
  return reply.retryAt;
}
