import { slotKeys, type ScriptCaller } from './caller.ts';
import { orders, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

export type Resolution = { value: unknown } | { rerun: true };

export const REPLY = { Resolved: { orders }, NotFound: {}, StepNotBlocked: {} } satisfies Replies;

/** Lets a blocked run continue (resolve.lua): with the operator's value for the step, or re-running it. */
export async function resolve(c: ScriptCaller, scope: string, runId: string, stepKey: string, resolution: Resolution): Promise<void> {
  const sk = c.keys.scope(scope);
  const options = 'rerun' in resolution
    ? { runId, stepKey, mode: 'rerun' }
    : { runId, stepKey, mode: 'value', value: JSON.stringify({ v: resolution.value }) };
  const reply = await c.call('resolve', REPLY, scope, { ...slotKeys(sk, runId), steps: sk.steps(runId) }, options);
  if (reply.refused) throw scriptError(reply.refused, runId);
  await c.dispatch(scope, reply.orders);
}
