import type { ScriptCaller } from './caller.ts';
import { flag, num, type Replies } from './reply.ts';

export const REPLY = { '': { stored: num, more: flag } } satisfies Replies;

/**
 * Takes the bytes of expired runs and forks off the scope's stored bytes (storage.lua), up
 * to 100 ledger entries per call. Returns the count, and whether more entries may be due.
 */
export async function trimStorage(c: ScriptCaller, scope: string): Promise<{ stored: number; more: boolean }> {
  const reply = await c.call('storage', REPLY, scope, { ledger: c.keys.scope(scope).storageLedger }, {});
  return { stored: reply.stored, more: reply.more };
}
