import type { ScriptCaller } from './caller.ts';
import { orders, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

export const REPLY = { Checked: { orders } } satisfies Replies;

/**
 * A run's score in the scope's `leases` passed (repair.lua): a running run whose lease ran out
 * gets a job whose claim takes it over; a dispatched or retrying one is dispatched again unless
 * `job` (its dispatch number's job, as the sweeper found it) is alive, and then only its
 * deadline moves. Returns whether it dispatched a job.
 */
export async function repair(c: ScriptCaller, scope: string, runId: string, job?: { dispatch: number; alive: boolean }): Promise<boolean> {
  const sk = c.keys.scope(scope);
  const reply = await c.call('repair', REPLY, scope, { run: sk.run(runId), leases: sk.leases }, {
    runId, ...(job ? { dispatch: job.dispatch, jobAlive: job.alive } : {}),
  });
  if (reply.refused) throw scriptError(reply.refused, runId);
  return c.dispatch(scope, reply.orders);
}
