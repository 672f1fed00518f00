import type { RecallOptions, ResolvedRecallOptions } from '../sdk/memory.ts';

export type { RecallOptions, ResolvedRecallOptions } from '../sdk/memory.ts';

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
