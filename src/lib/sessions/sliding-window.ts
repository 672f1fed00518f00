import type { HistoryMessage, MemorySession, SlidingWindowOptions } from './memory-session.ts';

export type { SlidingWindowOptions };

/**
 * The newest messages of `history` that fit the window, oldest first. The window moves in
 * units, not messages: an assistant message that called tools and the `tool` messages that
 * answer those calls stay together or go together, because a model given a tool result
 * without its call (or a call without its result) rejects the request or invents one.
 * The window is contiguous: it stops at the first unit that does not fit, so the agent
 * never sees a conversation with a hole in it.
 */
export function slidingWindow(history: readonly HistoryMessage[], options: SlidingWindowOptions): HistoryMessage[] {
  checkOptions(options);
  const maxMessages = options.maxMessages ?? Infinity;
  const maxChars = options.maxChars ?? Infinity;
  const units = toUnits(history);
  let count = 0;
  let chars = 0;
  let first = units.length;
  for (let i = units.length - 1; i >= 0; i--) {
    const u = units[i];
    if (count + u.length > maxMessages || chars + unitChars(u) > maxChars) break;
    count += u.length;
    chars += unitChars(u);
    first = i;
  }
  return units.slice(first).flat();
}

/** Gives any store a windowed `assemble` over its `load()` (its own `assemble` when it has one). */
export function withSlidingWindow(store: MemorySession, options: SlidingWindowOptions): MemorySession {
  checkOptions(options);
  const windowed: MemorySession = {
    load: () => store.load(),
    save: (all) => store.save(all),
    assemble: async (request) => slidingWindow(await (store.assemble ? store.assemble(request) : store.load()), options),
  };
  if (store.append) windowed.append = (messages, opts) => store.append!(messages, opts);
  return windowed;
}

function checkOptions(o: SlidingWindowOptions): void {
  const ok = (n: number | undefined) => n === undefined || (Number.isInteger(n) && n >= 0);
  if (!ok(o.maxMessages) || !ok(o.maxChars)) throw new TypeError('sliding window limits must be non-negative integers');
  if (o.maxMessages === undefined && o.maxChars === undefined) {
    throw new TypeError('a sliding window needs maxMessages, maxChars or both');
  }
}

/** Splits history into units: a tool-calling assistant message with its results, or one message. */
function toUnits(history: readonly HistoryMessage[]): HistoryMessage[][] {
  const units: HistoryMessage[][] = [];
  for (let i = 0; i < history.length; i++) {
    const m = history[i];
    const unit = [m];
    if (m.role === 'assistant' && m.toolCalls?.length) {
      const ids = new Set(m.toolCalls.map((c) => c.id));
      while (i + 1 < history.length && history[i + 1].role === 'tool' &&
        (history[i + 1].toolCallId === undefined || ids.has(history[i + 1].toolCallId!))) {
        unit.push(history[++i]);
      }
    }
    units.push(unit);
  }
  return units;
}

function unitChars(unit: HistoryMessage[]): number {
  let n = 0;
  for (const m of unit) {
    n += m.content.length;
    for (const c of m.toolCalls ?? []) n += c.name.length + c.arguments.length;
  }
  return n;
}
