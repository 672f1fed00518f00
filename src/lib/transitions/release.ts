import type { Attempt } from './attempt.ts';
import { leaseKeys, type ScriptCaller } from './caller.ts';
import { orders, type Replies } from './reply.ts';
import { LOST, ScriptCode, scriptError, type Fenced } from './script-codes.ts';

export const REPLY = { Released: { orders }, LeaseLost: {} } satisfies Replies;

/** Hands the run over at shutdown (release.lua): its lease ends now and another worker takes it at once. */
export async function release(c: ScriptCaller, attempt: Attempt): Promise<Fenced<void>> {
  const reply = await c.call('release', REPLY, attempt.scope, leaseKeys(attempt), { runId: attempt.runId, fence: attempt.fence });
  if (reply.refused?.code === ScriptCode.LeaseLost) return LOST;
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  await c.dispatch(attempt.scope, reply.orders);
  return { kind: 'written', value: undefined };
}
