import type { Config } from '../config/index.ts';
import type { SubmitLimit } from '../transitions/submit.ts';

/**
 * The per-scope submit rate limit: a token bucket in Redis (so every API process shares it),
 * in the scope's slot, taken inside the submit script (transitions/submit.lua) after every refusal:
 * only a run that is made spends a token, and bad input, a refused submit or an idempotent
 * replay spend none. An empty bucket is 429 RATE_LIMITED with the time to come back.
 * Undefined when SUBMIT_RATE_PER_SEC is 0 (off).
 */
export function submitLimit(config: Pick<Config, 'SUBMIT_RATE_PER_SEC' | 'SUBMIT_BURST'>): SubmitLimit | undefined {
  const { SUBMIT_RATE_PER_SEC: rate, SUBMIT_BURST: burst } = config;
  return rate === 0 ? undefined : { rate, burst };
}
