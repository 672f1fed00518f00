import { describe, expect, it } from 'vitest';
import { composeMemoryBlocks, type RecalledTurn } from '../src/lib/sessions/memory-blocks.ts';
import type { HistoryMessage } from '../src/lib/sessions/memory-session.ts';

/**
 * composeMemoryBlocks: what it copies and what it shares, both on purpose (see its comment).
 * A change to either half fails here, so the comment has to be thought through again.
 */
const conversation: HistoryMessage[] = [
  { role: 'user', content: 'hi', runId: 'r1' },
  { role: 'assistant', content: 'hello', runId: 'r1' },
];
const turns = (): RecalledTurn[] => [{ runId: 'r0', score: 0.9, user: 'older', assistant: 'answer' }];

describe('composeMemoryBlocks', () => {
  it('without caller memory or recall has no external block', () => {
    const blocks = composeMemoryBlocks(conversation, undefined, undefined);
    expect(blocks).toEqual({ conversation });
    expect('external' in blocks).toBe(false);
  });

  it('copies: a new external object per call, so top-level writes stay in it', () => {
    const caller = { plan: 'gold', prefs: { lang: 'pt' } };
    const callerCopy = structuredClone(caller);
    const first = composeMemoryBlocks(conversation, caller, turns());
    const second = composeMemoryBlocks(conversation, caller, turns());
    expect(first.external).not.toBe(second.external);
    (first.external as Record<string, unknown>).extra = 1;
    first.external!.caller = 'replaced';
    delete first.external!.recalledTurns;
    expect(second.external).toEqual({ caller: callerCopy, recalledTurns: turns() });
    expect(caller).toEqual(callerCopy);
    expect(conversation).toHaveLength(2);
  });

  it('shares: the conversation is the store array, the caller value is the caller object', () => {
    const caller = { prefs: { lang: 'pt' } };
    const recalled = turns();
    const blocks = composeMemoryBlocks(conversation, caller, recalled);
    expect(blocks.conversation).toBe(conversation);
    expect(blocks.external!.caller).toBe(caller);
    expect(blocks.external!.recalledTurns).toBe(recalled);
    // A write reaching into a shared value is seen on both sides: nothing else holds it.
    (blocks.external!.caller as typeof caller).prefs.lang = 'en';
    expect(caller.prefs.lang).toBe('en');
  });

  it('keeps caller memory that is falsy but present, and an empty recall', () => {
    expect(composeMemoryBlocks([], 0, undefined).external).toEqual({ caller: 0 });
    expect(composeMemoryBlocks([], false, []).external).toEqual({ caller: false, recalledTurns: [] });
    expect(composeMemoryBlocks([], undefined, []).external).toEqual({ recalledTurns: [] });
  });
});
