import type { BuiltinMemory, MemoryOption, RecallOptions, SlidingWindowOptions } from '../sdk/memory.ts';
import { resolveRecallOptions } from './recall-options.ts';

// The interfaces live in the sdk (sdk/memory.ts); named here too for the sessions room's users.
export type {
  AssembleRequest, BuiltinMemory, ForkSource, HistoryMessage, MemoryFactory, MemoryOption, MemorySession, SessionRef, SlidingWindowOptions,
} from '../sdk/memory.ts';

/**
 * The built-in Redis store with options: `memory: redisMemory({ window: { maxMessages: 20 } })`
 * gives the agent the last 20 messages as ctx.history while the whole history stays stored;
 * `recall: { embed, minScore }` adds the most relevant older turns to ctx.memoryBlocks.
 */
export function redisMemory(options: { window?: SlidingWindowOptions; recall?: RecallOptions } = {}): BuiltinMemory {
  const recall = options.recall ? resolveRecallOptions(options.recall) : undefined;
  return Object.freeze({ builtin: 'redis' as const, window: options.window, ...(recall ? { recall } : {}) });
}

export function isBuiltinMemory(option: MemoryOption | undefined): option is BuiltinMemory | undefined {
  return option === undefined || (typeof option === 'object' && option.builtin === 'redis');
}

/**
 * How many of the session's newest messages the claim reads for an agent with this memory:
 * 0 for a custom store (it reads its own), every message (-1) for recall (it scores every
 * turn), `window.maxMessages` for such a window (the window keeps no more), else `readMax`.
 * Of those, the claim hands over only the newest that fit HISTORY_READ_MAX_BYTES (transitions/claim.lua):
 * the window and recall then work on what fit, and the whole history stays stored.
 */
export function claimHistoryReads(option: MemoryOption | undefined, readMax: number): number {
  if (!isBuiltinMemory(option)) return 0;
  if (option?.recall) return -1;
  const windowMax = option?.window?.maxMessages;
  return windowMax ?? readMax;
}
