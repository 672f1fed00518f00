import type { RateLimitBucket } from '../../contract/admin.ts';
import { RUN_LIMIT_CODES } from '../../contract/runs.ts';
import { BatonError } from '../../errors.ts';
import type { Keys } from '../../keys.ts';
import type { Logger } from '../../logger.ts';
import type { Redis } from '../../redis/redis.ts';
import { BUCKET_NAME, perSecond, type BucketLimit, type RateLimits } from '../../config/rate-limits.ts';
import type { RateLimitRequest } from '../../sdk/agent.ts';
import { PermanentError } from '../../sdk/errors.ts';
import { classify } from '../../sdk/retry-policy.ts';
import type { RateBucketReply } from '../../transitions/rate-bucket.ts';
import type { FlowGateway } from '../../transitions/flow-gateway.ts';

/**
 * Model providers' rate limits, shared by every worker (RATE_LIMITS): a model call takes a
 * grant from its bucket before it is made, and settles it with the usage the provider
 * reported. The bucket lives in Redis and changes only through transitions/rate-bucket.lua, one
 * atomic call per step, so no two workers can both take the last grant of a window.
 *
 * Waiting holds nothing: the script answers how long to wait, the caller sleeps that long
 * (on a timer, no Redis connection held, no blocking command, no subscription) and asks again.
 * The run's lease is kept meanwhile by the worker's lease keeper, which beats on its own, and
 * the run's signal ends the wait at once.
 *
 * A bucket is shared by every scope: while scopes wait for it, it goes to them by their weight
 * (the scope's `weight` limit) in start-time fair order, and a scope alone takes all of it. It
 * is spread over its minute: at most a second's share (times the burst factor) in any second.
 * Both are rules of the script, on the one log every worker shares.
 *
 * The call site is `ctx.infer` (context.ts), which createChatAgent and baton/ai go through.
 */

/**
 * How long a grant stays in its bucket's window: the minute a provider counts over, and a
 * second more for the request to travel from the grant to the provider, so the provider's own
 * 60 s windows (by arrival) hold too when one request takes longer to get there than another.
 */
export const RATE_WINDOW_MS = 61_000;
/** While reservations of calls in flight could settle for less and make room: look again this often. */
const SETTLE_POLL_MS = 250;
/** A paused bucket is looked at again at least this often, so a resume (or a shorter pause) is seen soon. */
const PAUSE_POLL_MS = 1_000;
/** Waiters that wake for the same free grant wake a little apart. */
const JITTER_MS = 25;
/**
 * A waiting call asks again at least this often, however long the script said the wait is: its
 * scope's place in the fair order lapses without an ask (ASK_GRACE_MS after the one due), so a
 * scope whose runs went away holds the others back for about a second at most.
 */
const ASK_AGAIN_MS = 1_000;
/** How late past its due ask a waiting scope may come (the jitter, a round trip, a busy event loop) before its place lapses. */
const ASK_GRACE_MS = 500;
/**
 * A provider's 429 with Retry-After up to this long is waited out inside the step (the run keeps
 * its worker); a longer one ends the attempt as the retry policy says (the run leaves the worker
 * and comes back then). Either way the bucket is paused for everyone until then.
 */
const IN_STEP_PAUSE_MAX_MS = 60_000;
/** 429s one model call waits out inside its step before its error goes to the retry policy. */
const IN_STEP_RETRIES = 5;
/** How far ahead an operator may pause a bucket (untilMs / forMs); longer: pause it until resumed. */
export const MAX_PAUSE_MS = 366 * 24 * 3600_000;
/** The shortest pause an operator may ask for: waiters look at a paused bucket once a second. */
export const MIN_PAUSE_MS = 1_000;

export interface RateLimitEvents {
  /** An acquire of `bucket` ended after `ms` (0: granted at once), granted or given up (aborted). */
  waited?(bucket: string, ms: number): void;
  /** `bucket` was paused: a provider's 429 (counted by the process whose call got it), or an operator. */
  paused?(bucket: string, by: 'provider' | 'operator'): void;
}

/** How the limiter spreads its buckets and caps providers' pauses (RATE_LIMIT_BURST, RATE_LIMIT_PAUSE_MAX_MS). */
export interface RateLimiterSettings {
  /** Seconds' share of its minute a bucket grants in one second, where RATE_LIMITS sets no `burst`. */
  burst: number;
  /** The longest pause a provider's Retry-After sets. */
  pauseMaxMs: number;
  /** A scope's weight (its `weight` limit); absent: every scope weighs 1. */
  weightOf?(scope: string): Promise<number>;
}

export const DEFAULT_RATE_LIMITER_SETTINGS: RateLimiterSettings = { burst: 1, pauseMaxMs: 300_000 };

/** A grant taken from a bucket, to settle once the call's usage is known. */
export interface Grant {
  bucket: string;
  /** The grant's member in the bucket's log (transitions/rate-bucket.lua). */
  member: string;
  /** The tokens it reserved. */
  tokens: number;
}

/** A bucket as an operator sees it (GET /v1/rate-limits). */
export type BucketState = RateLimitBucket;

/** One model call under a bucket: what `call` needs to make it, and to learn what it cost. */
export interface LimitedCall<T> {
  /** Makes the call once. */
  run(): Promise<T>;
  /** The tokens the provider reported for the last run(); undefined: none reported. */
  reported(): number | undefined;
  /** The last run() streamed text to readers: a 429 after that is not made again here. */
  streamed(): boolean;
  /** Forgets what the last run() recorded, before the call is made again after a 429. */
  reset(): void;
}

/** A request checked against RATE_LIMITS: the bucket and the tokens to reserve, and the scope asking (absent: no share kept). */
export interface BucketRequest { bucket: string; tokens: number; scope?: string }

export class RateLimiter {
  constructor(
    private readonly transitions: FlowGateway,
    readonly limits: RateLimits,
    private readonly events: RateLimitEvents = {},
    readonly settings: RateLimiterSettings = DEFAULT_RATE_LIMITER_SETTINGS,
  ) {}

  /**
   * Checks an agent's `rateLimit` option: undefined when there is none (or it is optional and
   * RATE_LIMITS has no such bucket). Throws TypeError for a malformed one or an unknown bucket,
   * PermanentError RATE_LIMIT_TOO_LARGE for a reservation the bucket can never grant.
   */
  request(r: RateLimitRequest | undefined, where: string): BucketRequest | undefined {
    if (r === undefined) return undefined;
    if (typeof r !== 'object' || r === null || typeof r.key !== 'string' || !BUCKET_NAME.test(r.key)) {
      throw new TypeError(`${where}: rateLimit.key must be a bucket name matching ${BUCKET_NAME.source}`);
    }
    if (r.tokens !== undefined && (typeof r.tokens !== 'number' || !Number.isFinite(r.tokens) || r.tokens < 0)) {
      throw new TypeError(`${where}: rateLimit.tokens must be a number of tokens, 0 or more`);
    }
    const limit = this.limits.get(r.key);
    if (!limit) {
      if (r.optional === true) return undefined;
      const known = [...this.limits.keys()].join(', ') || 'none';
      throw new TypeError(`${where}: no rate-limit bucket ${JSON.stringify(r.key)} (RATE_LIMITS defines ${known})`);
    }
    if (limit.tpm !== undefined && r.tokens === undefined) {
      throw new TypeError(`${where}: the bucket ${r.key} limits tokens per minute: give rateLimit.tokens, the call's estimate`);
    }
    const tokens = Math.ceil(r.tokens ?? 0);
    if (limit.tpm !== undefined && tokens > limit.tpm) throw tooLarge(r.key, tokens, limit.tpm);
    return { bucket: r.key, tokens };
  }

  /**
   * Makes `c` under the bucket: a grant first (waiting for one as long as it takes, or until
   * `signal` aborts), then the call, then the grant settled with the usage the provider
   * reported (a call that reported none keeps its reservation). A provider's 429 with
   * Retry-After pauses the bucket for every worker until then, and the call is made again
   * after the pause when the retry policy calls the error transient and nothing of the answer
   * was streamed yet; otherwise the error goes on to the retry policy as it would have.
   */
  async call<T>(req: BucketRequest, signal: AbortSignal, c: LimitedCall<T>, log: Logger): Promise<T> {
    for (let retried = 0; ; retried++) {
      const grant = await this.acquire(req.bucket, req.tokens, signal, req.scope);
      let value: T;
      try {
        value = await c.run();
      } catch (err) {
        const pauseMs = providerPauseMs(err);
        if (pauseMs === undefined) {
          await this.settleQuietly(grant, c.reported(), log);
          throw err;
        }
        // The provider refused the call: it made no tokens.
        await this.settleQuietly(grant, 0, log);
        await this.providerPause(req.bucket, pauseMs);
        const again = !signal.aborted && !c.streamed() && retried < IN_STEP_RETRIES && pauseMs <= IN_STEP_PAUSE_MAX_MS;
        if (!again) throw err;
        log.info({ bucket: req.bucket, pauseMs }, 'the provider answered 429: the bucket is paused, and the call is made again after it');
        c.reset();
        continue;
      }
      await this.settleQuietly(grant, c.reported(), log);
      return value;
    }
  }

  /**
   * Waits for a grant of `tokens` from `bucket` (a bucket RATE_LIMITS defines), for `scope`
   * (absent: a call of no scope, which takes no place in the fair order). Rejects with the
   * signal's reason when it aborts.
   */
  async acquire(bucket: string, tokens: number, signal: AbortSignal, scope?: string): Promise<Grant> {
    const limit = this.limitOf(bucket);
    const started = Date.now();
    const who = scope === undefined ? {} : { scope, weight: (await this.settings.weightOf?.(scope)) ?? 1 };
    try {
      for (;;) {
        if (signal.aborted) throw signal.reason;
        const reply = await this.transitions.rateBucket(bucket, RATE_WINDOW_MS, {
          op: 'acquire', rpm: limit.rpm, tpm: limit.tpm, tokens, pollMs: SETTLE_POLL_MS, pauseMs: PAUSE_POLL_MS,
          second: this.spreadOf(limit), askMs: ASK_AGAIN_MS, graceMs: ASK_GRACE_MS, ...who,
        });
        if (reply.kind === 'granted') return { bucket, member: reply.member, tokens };
        if (reply.kind === 'too-large') throw tooLarge(bucket, tokens, reply.tpm);
        if (reply.kind !== 'wait') throw new Error(`the rate-bucket script answered ${reply.kind} to an acquire`);
        await sleep(Math.min(reply.waitMs, ASK_AGAIN_MS) + Math.floor(Math.random() * JITTER_MS), signal);
      }
    } finally {
      this.events.waited?.(bucket, Date.now() - started);
    }
  }

  /** Replaces a grant's reservation with the tokens the provider reported (giving back or taking the difference). */
  async settle(grant: Grant, actual: number): Promise<void> {
    await this.transitions.rateBucket(grant.bucket, RATE_WINDOW_MS, { op: 'settle', member: grant.member, actual: Math.ceil(actual) });
  }

  /**
   * A provider said to come back in `ms`: the bucket is paused for everyone until then, or for
   * RATE_LIMIT_PAUSE_MAX_MS when it asked for longer (what it asked is kept, for operators to
   * see). Returns whether this call moved the pause.
   */
  async providerPause(bucket: string, ms: number): Promise<boolean> {
    const asked = Math.max(1, Math.ceil(ms));
    const reply = expect(await this.transitions.rateBucket(bucket, RATE_WINDOW_MS, {
      op: 'pause', forMs: Math.min(asked, this.settings.pauseMaxMs), by: 'provider', askedMs: asked,
    }), 'paused');
    if (reply.moved) this.events.paused?.(bucket, 'provider');
    return reply.moved;
  }

  // ---- operator ----

  /** Every bucket RATE_LIMITS defines, as its window and pause stand now. */
  async list(): Promise<BucketState[]> {
    return Promise.all([...this.limits.keys()].map((bucket) => this.state(bucket)));
  }

  async state(bucket: string): Promise<BucketState> {
    const limit = this.limitOf(bucket);
    const s = expect(await this.transitions.rateBucket(bucket, RATE_WINDOW_MS, { op: 'read' }), 'state');
    const second = this.spreadOf(limit);
    const by = s.pausedBy === 'operator' ? 'operator' : 'provider';
    const asked = by === 'provider' && s.pauseAsked > 0 ? s.pauseAsked : null;
    return {
      bucket, rpm: limit.rpm ?? null, tpm: limit.tpm ?? null, burst: this.burstOf(limit),
      perSecond: { requests: second.requests ?? null, tokens: second.tokens ?? null },
      requests: s.requests, tokens: s.tokens, reservedTokens: s.reserved,
      lastSecond: { requests: s.secondRequests, tokens: s.secondTokens },
      waiting: { count: s.waitingCount, scopes: s.waiting },
      paused: s.pausedUntil === 0 ? null : {
        by,
        untilMs: s.pausedUntil < 0 ? null : s.pausedUntil,
        sinceMs: s.pausedAt > 0 ? s.pausedAt : null,
        askedMs: asked,
        // The pause a provider's Retry-After asked for, cut to RATE_LIMIT_PAUSE_MAX_MS.
        capped: asked !== null && s.pausedAt > 0 && s.pausedUntil > 0 && asked > s.pausedUntil - s.pausedAt,
      },
    };
  }

  /**
   * Pauses a bucket for every worker: until `untilMs` (epoch ms), for `forMs`, or (neither)
   * until resumed. Calls waiting for it go on waiting; calls already made are not stopped.
   */
  async pause(bucket: string, o: { untilMs?: number; forMs?: number } = {}): Promise<BucketState> {
    this.limitOf(bucket);
    if (o.untilMs !== undefined && o.forMs !== undefined) {
      throw new BatonError('VALIDATION_FAILED', 'Give untilMs or forMs, not both.', [{ path: 'body', message: 'untilMs and forMs are exclusive' }]);
    }
    const now = Date.now();
    if (o.untilMs !== undefined && (!Number.isSafeInteger(o.untilMs) || o.untilMs < now + MIN_PAUSE_MS || o.untilMs > now + MAX_PAUSE_MS)) {
      throw new BatonError('VALIDATION_FAILED', undefined, [
        { path: 'body.untilMs', message: 'must be a time (epoch ms) at least a second ahead, within 366 days' },
      ]);
    }
    if (o.forMs !== undefined && (!Number.isSafeInteger(o.forMs) || o.forMs < MIN_PAUSE_MS || o.forMs > MAX_PAUSE_MS)) {
      throw new BatonError('VALIDATION_FAILED', undefined, [{ path: 'body.forMs', message: `must be whole ms from ${MIN_PAUSE_MS} to ${MAX_PAUSE_MS}` }]);
    }
    const until = o.untilMs !== undefined || o.forMs !== undefined ? { untilMs: o.untilMs, forMs: o.forMs } : { untilMs: -1 };
    expect(await this.transitions.rateBucket(bucket, RATE_WINDOW_MS, { op: 'pause', ...until, by: 'operator' }), 'paused');
    this.events.paused?.(bucket, 'operator');
    return this.state(bucket);
  }

  /** Lifts a bucket's pause, an operator's or a provider's. */
  async resume(bucket: string): Promise<BucketState> {
    this.limitOf(bucket);
    expect(await this.transitions.rateBucket(bucket, RATE_WINDOW_MS, { op: 'resume' }), 'resumed');
    return this.state(bucket);
  }

  // ----

  private burstOf(limit: Readonly<BucketLimit>): number {
    return limit.burst ?? this.settings.burst;
  }

  /** The bucket's spread: requests and tokens in any one second. */
  private spreadOf(limit: Readonly<BucketLimit>): { requests?: number; tokens?: number } {
    return perSecond(limit, this.burstOf(limit));
  }

  private limitOf(bucket: string): Readonly<BucketLimit> {
    const limit = this.limits.get(bucket);
    if (!limit) {
      throw new BatonError('NOT_FOUND', 'No rate-limit bucket of that name (RATE_LIMITS).', [
        { path: 'params.bucket', message: `no bucket ${JSON.stringify(bucket)}` },
      ]);
    }
    return limit;
  }

  /**
   * A settle that fails (Redis out of reach) leaves the reservation counted, which only makes
   * later calls wait longer: the call it follows succeeded, and is not failed for it.
   */
  private async settleQuietly(grant: Grant, actual: number | undefined, log: Logger): Promise<void> {
    if (actual === undefined) return;
    try {
      await this.settle(grant, actual);
    } catch (err) {
      log.warn({ bucket: grant.bucket, err: (err as Error)?.message }, 'a rate-limit grant could not be settled; its reservation stays counted');
    }
  }
}

/** How long a scope's weight, once read, is used before it is read again: a changed weight counts within this. */
const WEIGHT_TTL_MS = 5_000;
/** Scopes whose weights are kept at most; past it the kept ones are dropped and read again. */
const WEIGHTS_KEPT = 10_000;

/**
 * Scopes' weights for the buckets' fair order: the scope's `weight` limit, else `fallback`
 * (SCOPE_WEIGHT), read from the scope's limits hash at most once per WEIGHT_TTL_MS per scope:
 * the bucket's script cannot read it (another slot), so each acquire carries it.
 */
export function scopeWeights(redis: Redis, keys: Keys, fallback: number): (scope: string) => Promise<number> {
  const kept = new Map<string, { weight: number; until: number }>();
  return async (scope) => {
    const now = Date.now();
    const hit = kept.get(scope);
    if (hit && hit.until > now) return hit.weight;
    const raw = await redis.hget(keys.scope(scope).limits, 'weight');
    const n = Number(raw);
    const weight = raw !== null && Number.isSafeInteger(n) && n >= 1 ? n : fallback;
    if (kept.size >= WEIGHTS_KEPT) kept.clear();
    kept.set(scope, { weight, until: now + WEIGHT_TTL_MS });
    return weight;
  };
}

/**
 * The pause a provider asked for: a 429 with Retry-After (a status the retry policy reads, or
 * a RetryAfterError the agent threw for it). undefined for every other error.
 */
function providerPauseMs(err: unknown): number | undefined {
  const c = classify(err);
  if (c.kind !== 'transient' || c.retryAfterMs === undefined || !Number.isFinite(c.retryAfterMs)) return undefined;
  if (c.code !== 'HTTP_429' && c.code !== 'RETRY_AFTER') return undefined;
  return Math.max(1, c.retryAfterMs);
}

function tooLarge(bucket: string, tokens: number, tpm: number): PermanentError {
  return new PermanentError(
    `the call reserves ${tokens} tokens, more than the bucket ${bucket} grants in a minute (tpm ${tpm}): it could never be made`,
    RUN_LIMIT_CODES.RATE_LIMIT_TOO_LARGE,
  );
}

function expect<K extends RateBucketReply['kind']>(reply: RateBucketReply, kind: K): Extract<RateBucketReply, { kind: K }> {
  if (reply.kind !== kind) throw new Error(`the rate-bucket script answered ${reply.kind}, not ${kind}`);
  return reply as Extract<RateBucketReply, { kind: K }>;
}

/** Sleeps `ms`, or rejects with the signal's reason as soon as it aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
