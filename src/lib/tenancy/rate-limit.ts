import type { Redis } from 'ioredis';
import type { Config } from '../config.ts';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import { runScript } from '../engine/scripts.ts';

/**
 * The per-scope submit rate limit: a token bucket in Redis (so every API process shares it),
 * in the scope's slot. Called only for a submit that passed validation, so bad input never
 * spends a token or writes a bucket.
 */
export class SubmitRateLimiter {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'SUBMIT_RATE_PER_SEC' | 'SUBMIT_BURST'>,
  ) {}

  /** Takes one token of the scope's bucket; an empty bucket is a 429 saying when to come back. */
  async take(scope: string): Promise<void> {
    const { SUBMIT_RATE_PER_SEC: rate, SUBMIT_BURST: burst } = this.config;
    if (rate === 0) return;
    const reply = await runScript(this.redis, 'rate-limit', [this.keys.scope(scope).submitBucket], [rate, burst, 1]);
    if (Number(reply[0]) === 1) return;
    const waitMs = Number(reply[1]);
    // Retry-After is whole seconds; rounding up never invites a retry that would fail again.
    const seconds = Math.max(1, Math.ceil(waitMs / 1000));
    throw new BatonError('RATE_LIMITED', undefined, [{ path: 'scope', message: `retry in ${waitMs} ms` }], {
      'Retry-After': String(seconds),
    });
  }
}
