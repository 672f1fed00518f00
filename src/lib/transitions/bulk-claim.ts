import { operationKeys } from './bulk-cancel.ts';
import type { ScriptCaller } from './caller.ts';
import { text, unexpected, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

export const REPLY = { Claimed: { cursor: text }, NotNow: {} } satisfies Replies;

/** Takes an operation's next batch under the lease `token` (bulk-claim.lua); returns the cursor it starts after, undefined when not now. */
export async function claimBatch(
  c: ScriptCaller, scope: string, id: string, o: { token: string; now: number; leaseMs: number },
): Promise<string | undefined> {
  const reply = await c.call('bulk-claim', REPLY, scope, operationKeys(c, scope, id), { id, ...o });
  if (reply.refused) return unexpected('bulk-claim', reply.refused);
  return reply.code === Outcome.bulkClaim.Claimed ? reply.cursor : undefined;
}
