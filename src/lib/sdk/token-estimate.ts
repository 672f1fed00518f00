/**
 * A model call's tokens, estimated before it is made, for the checks that must come before
 * the provider's count does (a scope's daily token budget): the prompt's size plus the
 * output the call may produce at most.
 */

/**
 * Characters per token of the prompt as sent: about 4 for English text in the tokenizers of
 * current models. The prompt is measured as its JSON (roles, quotes, tool schemas included),
 * which counts a little more than the model sees, so the estimate errs high.
 */
const CHARS_PER_TOKEN = 4;

/**
 * `prompt` (messages, or any JSON the provider is sent; a string is measured as it is) as
 * tokens, plus `maxTokens` when the call has one (the most output it may produce). A
 * prompt that cannot be measured (a cycle, a BigInt) counts as none.
 */
export function estimateCallTokens(prompt: unknown, maxTokens?: number | null): number {
  let chars: number;
  try {
    chars = typeof prompt === 'string' ? prompt.length : (JSON.stringify(prompt) ?? '').length;
  } catch {
    chars = 0;
  }
  const output = typeof maxTokens === 'number' && Number.isFinite(maxTokens) && maxTokens > 0 ? Math.ceil(maxTokens) : 0;
  return Math.ceil(chars / CHARS_PER_TOKEN) + output;
}
