import type { Config } from '../config.ts';
import { BatonError } from '../errors.ts';
import type { Transitions } from '../engine/transitions.ts';

/**
 * The per-scope submit rate limit: a token bucket in Redis (so every API process shares it),
 * in the scope's slot. Called only for a submit that passed validation, so bad input never
 * spends a token or writes a bucket.
 */
export class SubmitRateLimiter {
  constructor(
    private readonly transitions: Transitions,
    private readonly config: Pick<Config, 'SUBMIT_RATE_PER_SEC' | 'SUBMIT_BURST'>,
  ) {}

  /** Takes one token of the scope's bucket; an empty bucket is RATE_LIMITED, saying when to come back. */
  async take(scope: string): Promise<void> {
    const { SUBMIT_RATE_PER_SEC: rate, SUBMIT_BURST: burst } = this.config;
    if (rate === 0) return;
    const taken = await this.transitions.takeTokens(scope, { rate, burst, cost: 1 });
    if (taken.ok) return;
    throw new BatonError('RATE_LIMITED', undefined, [{ path: 'scope', message: `retry in ${taken.retryAfterMs} ms` }], {
      retryAfterMs: taken.retryAfterMs,
    });
  }
}
