import type { ScriptCaller } from './caller.ts';
import { num, numbers, strings, type Replies } from './reply.ts';

/** What one script call may copy or read: messages and bytes (one item larger than `bytes` comes alone). */
export interface CallBudget { messages: number; bytes: number }

export const REPLY = { '': { runIds: strings, sizes: numbers, next: num } } satisfies Replies;

/**
 * A page of a session's history from index `start` as a fork looks for its end: each
 * message's runId and size in bytes, not its text (fork-scan.lua), within `budget`.
 * `next` is the index the next page starts at, undefined after the last message.
 */
export async function forkScan(
  c: ScriptCaller, scope: string, sessionId: string, start: number, budget: CallBudget,
): Promise<{ runIds: string[]; sizes: number[]; next?: number }> {
  const reply = await c.call('fork-scan', REPLY, scope, { messages: c.keys.scope(scope).messages(sessionId) }, {
    start, maxMessages: budget.messages, maxBytes: budget.bytes,
  });
  return { runIds: reply.runIds, sizes: reply.sizes, ...(reply.next >= 0 ? { next: reply.next } : {}) };
}
