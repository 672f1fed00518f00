import type { ScriptCaller } from './caller.ts';
import { num, strings, type Replies } from './reply.ts';

export const REPLY = { '': { messages: strings, next: num } } satisfies Replies;

/**
 * A page of a session's history from index `start`, oldest first (history-page.lua): at most
 * `limit` messages and `maxBytes` bytes (the first message whatever its size). Read-only;
 * `next` is the index the next page starts at, undefined after the last message.
 */
export async function historyPage(
  c: ScriptCaller, scope: string, sessionId: string, start: number, limit: number, maxBytes: number,
): Promise<{ messages: string[]; next?: number }> {
  const reply = await c.call('history-page', REPLY, scope, { messages: c.keys.scope(scope).messages(sessionId) }, { start, limit, maxBytes });
  return { messages: reply.messages, ...(reply.next >= 0 ? { next: reply.next } : {}) };
}
