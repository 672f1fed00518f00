import type { ScriptCaller } from './caller.ts';
import { FORK_LEASE_MS, forkKeys } from './fork.ts';
import type { CallBudget } from './fork-scan.ts';
import { flag, num, type Replies } from './reply.ts';
import { Outcome, scriptError } from './script-codes.ts';

/** One chunk of a fork's copy; `gone`: the fork's lease passed (its state expired) or it is another's. */
export type ForkChunk =
  | { kind: 'copying' | 'done'; messages: number; bytes: number }
  | { kind: 'target-taken' | 'history-changed' | 'gone' };

export const REPLY = {
  Copied: { done: flag, messages: num, bytes: num }, TargetTaken: {}, HistoryChanged: {}, Gone: {},
} satisfies Replies;

/**
 * Copies the next chunk of the fork `token` (fork-copy.lua): at most `budget.messages`
 * messages and `budget.bytes` bytes (one larger message alone). The chunk that copies the
 * last message makes the copy the new session's history, in the same call.
 */
export async function forkCopy(
  c: ScriptCaller, scope: string, from: string, to: string, token: string, budget: CallBudget,
): Promise<ForkChunk> {
  const reply = await c.call('fork-copy', REPLY, scope, forkKeys(c, scope, from, to), {
    token, leaseMs: FORK_LEASE_MS, maxMessages: budget.messages, maxBytes: budget.bytes,
  });
  if (reply.refused) throw scriptError(reply.refused, '');
  switch (reply.code) {
    case Outcome.forkCopy.Copied: return { kind: reply.done ? 'done' : 'copying', messages: reply.messages, bytes: reply.bytes };
    case Outcome.forkCopy.TargetTaken: return { kind: 'target-taken' };
    case Outcome.forkCopy.HistoryChanged: return { kind: 'history-changed' };
    case Outcome.forkCopy.Gone: return { kind: 'gone' };
    default: throw new Error(`the fork-copy script answered the unexpected code ${reply.code}`);
  }
}
