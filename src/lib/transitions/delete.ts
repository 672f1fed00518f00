import type { ScriptCaller } from './caller.ts';
import { notFound, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';

/** A delete's outcome: the ended run is gone, or it has not ended (left as it was), or there was none. */
export type DeleteOutcome = 'deleted' | 'not-ended' | 'not-found';

export const REPLY = { Deleted: {}, NotEnded: {}, NotFound: {} } satisfies Replies;

/** Deletes an ended run now, as its retention's end would (delete.lua); one not ended is left as it is. */
export async function deleteRun(c: ScriptCaller, scope: string, runId: string): Promise<DeleteOutcome> {
  const sk = c.keys.scope(scope);
  const reply = await c.call('delete', REPLY, scope, { run: sk.run(runId), runs: sk.runs }, { runId });
  if (reply.refused) return notFound('delete', reply.refused);
  switch (reply.code) {
    case Outcome.delete.Deleted: return 'deleted';
    case Outcome.delete.NotEnded: return 'not-ended';
    default: throw new Error(`the delete script answered the unexpected code ${reply.code}`);
  }
}
