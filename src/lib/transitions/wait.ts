import type { WaitKind } from '../contract/runs.ts';
import type { Attempt } from './attempt.ts';
import { slotKeys, type ScriptCaller } from './caller.ts';
import { answered, flag, orders, time, type AnsweredWait, type Replies } from './reply.ts';
import { LOST, Outcome, ScriptCode, scriptError, type Fenced } from './script-codes.ts';

/** A wait an attempt reached and nobody answered yet, as the park transition takes it. */
export interface WaitRequest {
  /** `wait:<name>:<n>`. */
  key: string;
  kind: WaitKind;
  name: string;
  prompt?: unknown;
  schema?: Record<string, unknown>;
  /** Times out (a sleep ends) this long after the wait was first reached. */
  timeoutMs?: number;
  /** Ends at this epoch ms (ctx.sleepUntil). */
  untilMs?: number;
  /** SHA-256 (hex) of its resume token; input and approval waits have one. */
  tokenHash?: string;
}

export interface ParkReply {
  /** A cancel was requested meanwhile: the run was not parked; the attempt finishes it as cancelled. */
  cancelRequested: boolean;
  /** Waits whose deadline had passed by the park (they got their outcome in it). */
  answered: AnsweredWait[];
  /** The earliest deadline of the waits left pending. */
  nextAt: number | undefined;
  /** A wait the attempt reached had been answered meanwhile: the run was admitted again at once. */
  admittedAgain: boolean;
}

export const REPLY = {
  Parked: { orders, answered, nextAt: time, admittedAgain: flag }, CancelRequested: {}, LeaseLost: {},
} satisfies Replies;

/**
 * Parks the run on the waits its attempt reached (wait.lua): status waiting, lease and scope
 * slot released, the session kept. See wait.lua for waits answered meanwhile.
 */
export async function wait(c: ScriptCaller, attempt: Attempt, waits: readonly WaitRequest[]): Promise<Fenced<ParkReply>> {
  const timeouts: Record<string, number> = {};
  const untils: Record<string, number> = {};
  const tokens: Record<string, string> = {};
  const specs: string[] = [];
  for (const w of waits) {
    if (w.timeoutMs !== undefined) timeouts[w.key] = w.timeoutMs;
    if (w.untilMs !== undefined) untils[w.key] = w.untilMs;
    if (w.tokenHash !== undefined) tokens[w.key] = w.tokenHash;
    specs.push(JSON.stringify({ key: w.key, kind: w.kind, name: w.name, prompt: w.prompt, schema: w.schema }));
  }
  const reply = await c.call('wait', REPLY, attempt.scope, {
    ...slotKeys(attempt.keys, attempt.runId), steps: attempt.keys.steps(attempt.runId), waits: attempt.keys.waits(attempt.runId),
  }, { runId: attempt.runId, fence: attempt.fence, timeouts, untils, tokens }, specs);
  if (reply.refused?.code === ScriptCode.LeaseLost) return LOST;
  if (reply.refused) throw scriptError(reply.refused, attempt.runId);
  if (reply.code === Outcome.wait.CancelRequested) {
    return { kind: 'written', value: { cancelRequested: true, answered: [], nextAt: undefined, admittedAgain: false } };
  }
  await c.dispatch(attempt.scope, reply.orders);
  return { kind: 'written', value: { cancelRequested: false, answered: reply.answered, nextAt: reply.nextAt, admittedAgain: reply.admittedAgain } };
}
