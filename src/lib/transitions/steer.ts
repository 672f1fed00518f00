import type { Attempt } from './attempt.ts';
import type { ScriptCaller } from './caller.ts';
import { flag, text, type Replies } from './reply.ts';
import { scriptError } from './script-codes.ts';

/** Messages a run took at one boundary (steer.lua), in the order they were sent. */
export type TakenSteering = { id: string; content: string }[];

export const REPLY = { Taken: { taken: text, fresh: flag }, LeaseLost: {} } satisfies Replies;

/**
 * Takes the run's steering messages at its boundary number `boundary` (steer.lua): those
 * pending now, or, at a boundary an earlier attempt reached, the ones taken there then
 * (`fresh` false).
 */
export async function steer(
  c: ScriptCaller, attempt: Attempt, sessionId: string, boundary: number,
): Promise<{ taken: TakenSteering; fresh: boolean }> {
  const sk = attempt.keys;
  const reply = await c.call('steer', REPLY, attempt.scope, {
    run: attempt.runKey, steering: sk.steering(sessionId), pending: sk.steerPending(attempt.runId), taken: sk.steerTaken(attempt.runId),
  }, { runId: attempt.runId, fence: attempt.fence, boundary });
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  const taken: unknown = JSON.parse(reply.taken);
  return { taken: Array.isArray(taken) ? (taken as TakenSteering) : [], fresh: reply.fresh };
}
