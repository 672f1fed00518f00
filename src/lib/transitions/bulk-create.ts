import type { ScriptCaller } from './caller.ts';
import { unexpected, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

export const REPLY = { Created: {}, AtCap: {} } satisfies Replies;

/** Makes an operation (its hash's fields as given) unless its scope runs `maxRunning` already (bulk-create.lua). */
export async function createOperation(
  c: ScriptCaller, scope: string, id: string, fields: Record<string, string>, o: { maxRunning: number; now: number },
): Promise<'created' | 'at-cap'> {
  const sk = c.keys.scope(scope);
  const reply = await c.call('bulk-create', REPLY, scope, {
    operation: sk.operation(id), operations: sk.operations, active: sk.operationsActive,
  }, { id, fields, ...o });
  if (reply.refused) return unexpected('bulk-create', reply.refused);
  return reply.code === Outcome.bulkCreate.Created ? 'created' : 'at-cap';
}
