import type { WaitKind } from '../contract/runs.ts';
import { waitKeys, type ScriptCaller } from './caller.ts';
import { num, orders, text, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

export interface ResumedWait { kind: WaitKind; since: number; runtime: string; agent: string }

export const REPLY = {
  Resumed: { orders, kind: text, since: num, runtime: text, agent: text }, NotFound: {}, WaitNotPending: {},
} satisfies Replies;

/**
 * Resumes a pending wait with `value` (JSON text, already checked against its schema), once
 * (resume.lua). With `tokenHash` (the token route) the wait must hold that token. Throws WAIT_NOT_PENDING.
 */
export async function resumeWait(
  c: ScriptCaller, scope: string, runId: string, waitKey: string, o: { value: string; tokenHash?: string },
): Promise<ResumedWait> {
  const reply = await c.call('resume', REPLY, scope, waitKeys(c, scope, runId), { runId, waitKey, value: o.value, tokenHash: o.tokenHash });
  if (reply.refused) throw scriptError(reply.refused, runId);
  await c.dispatch(scope, reply.orders);
  return { kind: reply.kind as WaitKind, since: reply.since, runtime: reply.runtime, agent: reply.agent };
}
