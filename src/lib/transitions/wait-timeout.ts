import { waitKeys, type ScriptCaller } from './caller.ts';
import { answered, orders, text, type AnsweredWait, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

export const REPLY = { Checked: { orders, answered, runtime: text, agent: text } } satisfies Replies;

/** A run's earliest wait deadline passed (wait-timeout.lua): outcomes for the waits due, a waiting run goes on. */
export async function waitTimeout(
  c: ScriptCaller, scope: string, runId: string,
): Promise<{ answered: AnsweredWait[]; runtime: string; agent: string }> {
  const reply = await c.call('wait-timeout', REPLY, scope, waitKeys(c, scope, runId), { runId });
  if (reply.refused) throw scriptError(reply.refused, runId);
  await c.dispatch(scope, reply.orders);
  return { answered: reply.answered, runtime: reply.runtime, agent: reply.agent };
}
