import type { Attempt } from './attempt.ts';
import { UNDECODED, type ScriptCaller } from './caller.ts';
import { decode, type Replies } from './reply.ts';
import { LeaseLostError } from './script-codes.ts';

/** One run's batch of events for appendMany: the writer's number, applied once per attempt. */
export interface AppendItem { attempt: Attempt; batch: number; events: readonly (readonly [string, string])[] }
export type AppendAnswer = 'applied' | 'duplicate';

/** One entry per run, in order: its code. */
export const REPLY = { Applied: {}, Duplicate: {}, LeaseLost: {} } satisfies Replies;

/**
 * Appends the batches of several runs of one scope in one call (append.lua; one notification
 * for all): one answer per item, in order, a LeaseLostError for an item whose lease moved on.
 * A call that fails (Redis) rejects; every item may then be sent again, as each batch applies once.
 */
export async function appendMany(c: ScriptCaller, items: readonly AppendItem[]): Promise<(AppendAnswer | LeaseLostError)[]> {
  if (items.length === 0) return [];
  const first = items[0].attempt;
  if (items.some((i) => i.attempt.scope !== first.scope)) throw new Error('appendMany takes the runs of one scope');
  const raw = await c.call('append', UNDECODED, first.scope, { run: first.runKey }, {
    // Fence and batch as text: the script uses them as text (the record's fields, `appendedBatch`).
    runs: items.map((i) => [i.attempt.runId, String(i.attempt.fence), String(i.batch), i.events.length]),
  }, items.flatMap((i) => i.events.flat()));
  if (!Array.isArray(raw) || raw.length !== items.length) throw new Error('malformed append reply');
  return items.map((item, n) => {
    const reply = decode('append', REPLY, [raw[n]]);
    if (reply.refused) return new LeaseLostError(item.attempt.runId);
    return reply.outcome === 'Duplicate' ? 'duplicate' : 'applied';
  });
}
