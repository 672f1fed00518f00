import type { HistoryMessage } from './memory-session.ts';

/** A past turn of the session that recall found relevant to the new input (see recall.ts). */
export interface RecalledTurn {
  /** The run that committed the turn. */
  runId: string;
  /** Cosine similarity between the new input and the turn, in [-1, 1]. */
  score: number;
  /** The turn's user message, at most `textCap` bytes (then ending in `…[truncated]`). */
  user: string;
  /** The turn's answer, capped the same way. */
  assistant: string;
  createdAt?: number;
  /** The answer was cut short (error, cancel, truncation) when it was committed. */
  incomplete?: boolean;
}

/** Memory that did not come from the session's own conversation window. */
export interface ExternalMemory {
  /** The submit's `memory` (the same value as ctx.memory). Absent when the submit had none. */
  caller?: unknown;
  /** Turns recall found, best first. Absent when the agent's store has no recall; `[]` when it found none. */
  recalledTurns?: RecalledTurn[];
}

/** ctx.memoryBlocks: everything the agent may remember for this turn, by where it came from. */
export interface MemoryBlocks {
  /** What the memory store assembled (the history or its window): the same array as ctx.history. */
  readonly conversation: readonly HistoryMessage[];
  /** Caller memory and recalled turns. Absent when there is neither. */
  readonly external?: ExternalMemory;
}

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
