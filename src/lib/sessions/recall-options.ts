import type { Embedder } from './embeddings.ts';

/** `redisMemory({ recall })`: relevant past turns of the session, found by embedding similarity. */
export interface RecallOptions {
  /** Texts to vectors; `openAIEmbeddings({ model })` is the provided one. */
  embed: Embedder;
  /**
   * Turns whose cosine similarity to the new input is below this are left out. No default:
   * what counts as related differs from one embedding model to the next.
   */
  minScore: number;
  /** At most this many turns, best first. Default 5: enough to bring back a thread, little enough to stay a side note in a prompt. */
  maxTurns?: number;
  /**
   * Each recalled turn's user and assistant text is cut to this many bytes of UTF-8 (then
   * `…[truncated]` is appended). Default 2048: a recalled turn is a reminder, not a
   * transcript, and one long answer must not crowd the window out of the prompt.
   */
  textCap?: number;
}

export type ResolvedRecallOptions = Required<RecallOptions>;

export const RECALL_DEFAULTS = { maxTurns: 5, textCap: 2048 } as const;

/** Checks the options when the agent is defined, so a bad one stops the worker at start, not a run. */
export function resolveRecallOptions(o: RecallOptions): ResolvedRecallOptions {
  if (typeof o?.embed !== 'function') throw new TypeError('recall needs an embed function, e.g. openAIEmbeddings({ model })');
  if (typeof o.minScore !== 'number' || !(o.minScore >= -1 && o.minScore <= 1)) {
    throw new TypeError('recall.minScore must be a number between -1 and 1 (a cosine similarity)');
  }
  const maxTurns = o.maxTurns ?? RECALL_DEFAULTS.maxTurns;
  const textCap = o.textCap ?? RECALL_DEFAULTS.textCap;
  if (!Number.isInteger(maxTurns) || maxTurns < 1) throw new TypeError('recall.maxTurns must be a positive integer');
  if (!Number.isInteger(textCap) || textCap < 1) throw new TypeError('recall.textCap must be a positive integer (bytes)');
  return { embed: o.embed, minScore: o.minScore, maxTurns, textCap };
}
