import type { ExternalMemory, HistoryMessage, MemoryBlocks, RecalledTurn } from '../sdk/memory.ts';

export type { ExternalMemory, MemoryBlocks, RecalledTurn } from '../sdk/memory.ts';

/**
 * Builds the blocks of one attempt. Nothing the store or the caller handed over is written:
 *
 * - `external` is a new object on every call, so an agent that adds, replaces or deletes a
 *   top-level key of it changes neither ctx.memory nor what the next attempt gets;
 * - its values are not copied: `caller` is the very value ctx.memory holds, and the
 *   recalled turns are the array recall built for this attempt alone. A write reaching
 *   into `caller` is seen through ctx.memory too. That is safe because the run record is
 *   parsed anew for every attempt, so no one else holds that value, and a deep copy of an
 *   arbitrary JSON value per attempt would cost as much as the value is large;
 * - `conversation` is the store's array itself, shared with ctx.history for the same
 *   reason: the runtime only reads it, and the built-in store reads it anew per attempt.
 *
 * test/memory-blocks.test.ts holds both halves, the copy and the sharing.
 */
export function composeMemoryBlocks(
  conversation: readonly HistoryMessage[],
  caller: unknown,
  recalledTurns: RecalledTurn[] | undefined,
): MemoryBlocks {
  if (caller === undefined && recalledTurns === undefined) return { conversation };
  const external: ExternalMemory = {};
  if (caller !== undefined) external.caller = caller;
  if (recalledTurns !== undefined) external.recalledTurns = recalledTurns;
  return { conversation, external };
}
