import type { NamedKeys } from './scripts.ts';
import type { ScriptCaller } from './caller.ts';
import { notFound, type Replies } from './reply.ts';

export const REPLY = { Stopped: {}, NotFound: {} } satisfies Replies;

/** The keys of an operation and its scope's running ones (bulk-cancel, bulk-claim, bulk-commit). */
export function operationKeys(c: ScriptCaller, scope: string, id: string): NamedKeys {
  const sk = c.keys.scope(scope);
  return { operation: sk.operation(id), active: sk.operationsActive };
}

/** Stops a running operation (bulk-cancel.lua; an ended one stays as it is); kept readable for `retentionMs`. */
export async function cancelOperation(
  c: ScriptCaller, scope: string, id: string, o: { now: number; retentionMs: number },
): Promise<'stopped' | 'not-found'> {
  const reply = await c.call('bulk-cancel', REPLY, scope, operationKeys(c, scope, id), { id, ...o });
  return reply.refused ? notFound('bulk-cancel', reply.refused) : 'stopped';
}
