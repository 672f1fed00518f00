import type { ScriptCaller } from './caller.ts';
import { num, type Replies } from './reply.ts';
import type { SubmitLimit } from './submit.ts';

export const REPLY = { '': { left: num, retryAfterMs: num } } satisfies Replies;

/**
 * Charges `bytes` a costly read served to the scope's read budget (read-cost.lua; 0: a
 * look, nothing written): `limit` is the configured default (rate 0: none), the scope's own
 * limits override it. Answers what the bucket holds after it, and how long the scope's costly
 * reads are refused (0: not).
 */
export async function chargeRead(
  c: ScriptCaller, scope: string, bytes: number, limit: SubmitLimit,
): Promise<{ left: number; retryAfterMs: number }> {
  const sk = c.keys.scope(scope);
  const reply = await c.call('read-cost', REPLY, scope, { bucket: sk.readBucket, limits: sk.limits }, { bytes, ...limit });
  return { left: reply.left, retryAfterMs: reply.retryAfterMs };
}
