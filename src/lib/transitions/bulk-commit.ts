import { operationKeys } from './bulk-cancel.ts';
import type { ScriptCaller } from './caller.ts';
import { unexpected, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

/** A bulk operation's batch to count (bulk-commit.lua), fenced by the lease token its claim took. */
export interface BatchCommit {
  token: string;
  /** The claim's time (Redis time): the operation's finishedAt if this batch ends it. */
  now: number;
  matched: number;
  done: number;
  failed: number;
  /** The listing position the batch reached. */
  cursor: string;
  /** The listing has no more runs for the operation: it ends `done`. */
  finished: boolean;
  /** When the operation's next batch may start (its pace, or a back-off). */
  notBefore: number;
  /** The batch's last failed run (absent: none failed). */
  lastError?: { runId: string; code: string; message: string };
  /** How long an ended operation stays readable. */
  retentionMs: number;
}

export const REPLY = { Committed: {}, NotHeld: {} } satisfies Replies;

/** Counts a batch, if its lease is still the caller's (bulk-commit.lua). Returns whether it was. */
export async function commitBatch(c: ScriptCaller, scope: string, id: string, b: BatchCommit): Promise<boolean> {
  const { lastError, ...counts } = b;
  const reply = await c.call('bulk-commit', REPLY, scope, operationKeys(c, scope, id), {
    id, ...counts, lastError: lastError && JSON.stringify(lastError),
  });
  if (reply.refused) return unexpected('bulk-commit', reply.refused);
  return reply.code === Outcome.bulkCommit.Committed;
}
