import { shareAt } from '../engine/flow/fair-share.ts';
import type { FairLevel } from '../transitions/caller.ts';
import { z } from 'zod';
import type { Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { Keys } from '../keys.ts';
import { LIMIT_FIELDS, type LimitField, type ScopeLimits, type ScopeLimitsView } from '../contract/admin.ts';
import { utcDay } from '../engine/flow/budgets.ts';

/**
 * A scope's limits, set by an operator and stored in Redis, so every process applies a change
 * without a restart. The layout is fixed, since the transitions (Lua) and the workers read it
 * directly: the hash `keys.scope(scope).limits`, one field per limit named as LIMIT_FIELDS
 * names it, each value a number as decimal text. A field absent is the configured default;
 * `0` in maxActivePerKey or tokensPerDay is "none" (no per-key cap, no daily budget), as the
 * configured defaults MAX_ACTIVE_PER_KEY and TOKENS_PER_DAY say it, and the API shows it as null.
 *
 * Who applies which: the submit transition reads submitRatePerSec and submitBurst (and
 * maxQueuedRuns, maxStoredBytes), the fork's forksPerMinute, forkBytesPerMinute and
 * maxStoredBytes, a run's end retentionMs, the scheduler maxActive, maxActivePerKey and weight,
 * the worker tokensPerDay, each API process maxStreams (through maxStreams() below, cached
 * for LIMITS_CACHE_MS), and the read charge (transitions/read-cost.lua) readBytesPerSec and
 * readBurstBytes.
 */

const int = (min: number, max: number) => z.number().int().min(min).max(max);

/**
 * What an operator may set, and what a stored value must be: each bound is the one of the
 * configured default it overrides (MAX_ACTIVE_PER_SCOPE, SUBMIT_BURST, SSE_MAX_PER_SCOPE ...).
 * A rate is at least 0.001 a second (one submit in about 17 minutes), so it is always written
 * as plain decimals; a rate of 0 (no limit) is a deployment's choice (SUBMIT_RATE_PER_SEC),
 * not one scope's.
 */
export const LIMIT_SCHEMAS = {
  maxActive: int(1, 100_000),
  maxActivePerKey: int(1, 100_000).nullable(),
  submitRatePerSec: z.number().min(0.001).max(1_000_000),
  submitBurst: int(1, 1_000_000),
  weight: int(1, 1_000),
  maxStreams: int(1, 1_000_000),
  tokensPerDay: int(1, 1_000_000_000_000).nullable(),
  readBytesPerSec: int(1, 1024 ** 4),
  readBurstBytes: int(1, 1024 ** 4),
  maxQueuedRuns: int(1, 10_000_000).nullable(),
  maxStoredBytes: int(1, 1024 ** 4).nullable(),
  forksPerMinute: int(1, 1_000_000).nullable(),
  forkBytesPerMinute: int(1, 1024 ** 4).nullable(),
  // A second to a year: a finished run must stay long enough to be read once, and not for ever.
  retentionMs: int(1_000, 366 * 86_400_000),
} satisfies Record<LimitField, z.ZodType>;

/** A PUT's body: the overrides, each field optional (absent: the default applies); unknown fields are refused. */
export const limitOverrides = z.strictObject({
  maxActive: LIMIT_SCHEMAS.maxActive.optional(),
  maxActivePerKey: LIMIT_SCHEMAS.maxActivePerKey.optional().describe('null: no per-key cap, whatever the default'),
  submitRatePerSec: LIMIT_SCHEMAS.submitRatePerSec.optional(),
  submitBurst: LIMIT_SCHEMAS.submitBurst.optional(),
  weight: LIMIT_SCHEMAS.weight.optional(),
  maxStreams: LIMIT_SCHEMAS.maxStreams.optional(),
  tokensPerDay: LIMIT_SCHEMAS.tokensPerDay.optional().describe('null: no daily token budget, whatever the default'),
  readBytesPerSec: LIMIT_SCHEMAS.readBytesPerSec.optional(),
  readBurstBytes: LIMIT_SCHEMAS.readBurstBytes.optional(),
  maxQueuedRuns: LIMIT_SCHEMAS.maxQueuedRuns.optional().describe('null: no cap on runs queued and not started'),
  maxStoredBytes: LIMIT_SCHEMAS.maxStoredBytes.optional().describe('null: no cap on stored bytes'),
  forksPerMinute: LIMIT_SCHEMAS.forksPerMinute.optional().describe('null: no cap on forks a minute'),
  forkBytesPerMinute: LIMIT_SCHEMAS.forkBytesPerMinute.optional().describe('null: no cap on bytes forked a minute'),
  retentionMs: LIMIT_SCHEMAS.retentionMs.optional().describe('ms a finished run stays readable; applies to runs that end after the change'),
});
export type LimitOverrides = z.infer<typeof limitOverrides>;

/** The limits whose "none" is stored as 0. */
const NULLABLE: ReadonlySet<LimitField> = new Set([
  'maxActivePerKey', 'tokensPerDay', 'maxQueuedRuns', 'maxStoredBytes', 'forksPerMinute', 'forkBytesPerMinute',
]);

/**
 * How long a process keeps a scope's limits before reading them again (maxStreams). One
 * second: an operator's change applies to new streams within it, and a scope opening
 * hundreds of streams a second costs Redis one read a second, not one per stream.
 */
export const LIMITS_CACHE_MS = 1_000;

/** Scopes whose limits one process keeps at once; past it the cache starts over (a bounded working set). */
const CACHE_MAX = 10_000;

/** The configured defaults, as limits. */
export function limitDefaults(c: Pick<Config,
  'MAX_ACTIVE_PER_SCOPE' | 'MAX_ACTIVE_PER_KEY' | 'SUBMIT_RATE_PER_SEC' | 'SUBMIT_BURST' | 'SCOPE_WEIGHT' | 'SSE_MAX_PER_SCOPE' | 'TOKENS_PER_DAY'
  | 'READ_BYTES_PER_SEC' | 'READ_BURST_BYTES'
  | 'MAX_QUEUED_RUNS_PER_SCOPE' | 'STORAGE_MAX_BYTES_PER_SCOPE' | 'FORKS_PER_MINUTE' | 'FORK_BYTES_PER_MINUTE' | 'RETENTION_MS'
>): ScopeLimits {
  const none = (n: number) => (n === 0 ? null : n);
  return {
    maxActive: c.MAX_ACTIVE_PER_SCOPE,
    maxActivePerKey: c.MAX_ACTIVE_PER_KEY === 0 ? null : c.MAX_ACTIVE_PER_KEY,
    submitRatePerSec: c.SUBMIT_RATE_PER_SEC,
    submitBurst: c.SUBMIT_BURST,
    weight: c.SCOPE_WEIGHT,
    maxStreams: c.SSE_MAX_PER_SCOPE,
    tokensPerDay: c.TOKENS_PER_DAY === 0 ? null : c.TOKENS_PER_DAY,
    readBytesPerSec: c.READ_BYTES_PER_SEC,
    readBurstBytes: c.READ_BURST_BYTES,
    maxQueuedRuns: none(c.MAX_QUEUED_RUNS_PER_SCOPE),
    maxStoredBytes: none(c.STORAGE_MAX_BYTES_PER_SCOPE),
    forksPerMinute: none(c.FORKS_PER_MINUTE),
    forkBytesPerMinute: none(c.FORK_BYTES_PER_MINUTE),
    retentionMs: c.RETENTION_MS,
  };
}

export interface ScopeLimitStoreOptions {
  /** Gives a scope's free slots to its parked runs (SweeperGateway.fill): after a change that may have raised a limit. */
  fill(scope: string): Promise<unknown>;
  /** Event streams of the scope open in this process (OpenStreams), for `inUse.streams`. */
  openStreams(scope: string): number;
}

export class ScopeLimitStore {
  readonly defaults: Readonly<ScopeLimits>;
  private readonly cache = new Map<string, { until: number; limits: Promise<ScopeLimits> }>();

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    config: Parameters<typeof limitDefaults>[0],
    private readonly o: ScopeLimitStoreOptions,
  ) {
    this.defaults = Object.freeze(limitDefaults(config));
  }

  /** The scope's limits, where each comes from, and how much of them is in use. */
  async view(scope: string): Promise<ScopeLimitsView> {
    const sk = this.keys.scope(scope);
    const [stored, [active, parked], fair, tokens, reads, [queued, dispatched, bytes]] = await Promise.all([
      this.redis.hgetall(sk.limits),
      this.redis.hmget(sk.meta, 'active', 'parked'),
      // The fair share's level while scopes contend for the workers (src/lib/engine/flow/fair-share.ts).
      this.redis.get(this.keys.fairShare),
      // Today's model tokens, the total tokensPerDay is checked against (src/lib/engine/flow/budgets.ts).
      this.redis.hget(sk.usage(utcDay(Date.now())), 'tokens'),
      // The read bucket as its last charge left it (src/lib/tenancy/read-budget.ts).
      this.redis.hmget(sk.readBucket, 'tokens', 'at'),
      // What maxQueuedRuns and maxStoredBytes are checked against (transitions/submit.lua).
      this.redis.multi().zcard(sk.runsByStatus('queued')).zcard(sk.runsByStatus('dispatched')).get(sk.storedBytes).exec()
        .then((r) => (r ?? []).map(([err, v]) => {
          if (err) throw err;
          return v === null ? '0' : String(v);
        })),
    ]);
    const set = this.decode(scope, stored);
    const level = fair === null ? undefined : (JSON.parse(fair) as FairLevel).level;
    const weight = set.weight ?? this.defaults.weight;
    const limits = { ...this.defaults, ...set };
    return {
      scope,
      limits,
      set,
      defaults: { ...this.defaults },
      inUse: {
        active: counter(scope, 'active', active) ?? 0,
        parked: counter(scope, 'parked', parked) ?? 0,
        share: level === undefined ? null : shareAt(level, weight),
        streams: this.o.openStreams(scope),
        tokensToday: counter(scope, 'tokens', tokens) ?? 0,
        readBytesLeft: bytesLeft(limits, counter(scope, 'read tokens', reads[0]), counter(scope, 'read time', reads[1])),
        queuedRuns: finite(scope, 'queued', queued) + finite(scope, 'dispatched', dispatched),
        storedBytes: finite(scope, 'storage:bytes', bytes),
      },
    };
  }

  /**
   * Replaces the scope's overrides with `set` in one MULTI: a field it lacks reverts to its
   * default, null is "none". Then the scope's parked runs get the slots a raised limit freed.
   * `set` must have passed limitOverrides (the route's schema): it is checked again here, so
   * nothing out of range is ever written.
   */
  async replace(scope: string, set: LimitOverrides): Promise<ScopeLimitsView> {
    const checked = limitOverrides.parse(set);
    const fields: string[] = [];
    for (const field of LIMIT_FIELDS) {
      const value = checked[field];
      if (value === undefined) continue;
      fields.push(field, value === null ? '0' : String(value));
    }
    const sk = this.keys.scope(scope);
    const m = this.redis.multi().del(sk.limits);
    if (fields.length) m.hset(sk.limits, ...fields);
    await m.exec();
    this.cache.delete(scope);
    await this.o.fill(scope);
    return this.view(scope);
  }

  /** The scope's limits in force, as this process last read them (at most LIMITS_CACHE_MS ago). */
  limits(scope: string): Promise<ScopeLimits> {
    const now = Date.now();
    const cached = this.cache.get(scope);
    if (cached && cached.until > now) return cached.limits;
    if (this.cache.size >= CACHE_MAX) this.cache.clear();
    const limits = this.redis.hgetall(this.keys.scope(scope).limits)
      .then((stored) => ({ ...this.defaults, ...this.decode(scope, stored) }));
    const entry = { until: now + LIMITS_CACHE_MS, limits };
    this.cache.set(scope, entry);
    // A failed read is not kept: the next caller reads again.
    limits.catch(() => {
      if (this.cache.get(scope) === entry) this.cache.delete(scope);
    });
    return limits;
  }

  /** The scope's cap of event streams open at once in this process. */
  async maxStreams(scope: string): Promise<number> {
    return (await this.limits(scope)).maxStreams;
  }

  /**
   * The overrides of a stored hash. A value that is not a limit's (written by hand) is an
   * error naming it, never read as its default: the operator sees it, and a PUT replaces it.
   * Fields that are not limits are left to whoever wrote them.
   */
  private decode(scope: string, stored: Record<string, string>): Partial<ScopeLimits> {
    const out: Partial<Record<LimitField, number | null>> = {};
    for (const field of LIMIT_FIELDS) {
      const text = stored[field];
      if (text === undefined) continue;
      const n = /^\d+(\.\d+)?$/.test(text) ? Number(text) : NaN;
      const value = n === 0 && NULLABLE.has(field) ? null : n;
      if (!LIMIT_SCHEMAS[field].safeParse(value).success) {
        throw new Error(`the limits of scope ${scope} hold an invalid ${field}: ${JSON.stringify(text)}`);
      }
      out[field] = value;
    }
    return out as Partial<ScopeLimits>;
  }
}

function finite(scope: string, field: string, text: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n)) throw new Error(`the counters of scope ${scope} hold an invalid ${field}: ${JSON.stringify(text)}`);
  return n;
}

/** What a read bucket holds now: what its last charge left, refilled since (no key: full). */
function bytesLeft(l: ScopeLimits, tokens: number | undefined, at: number | undefined): number {
  const burst = l.readBurstBytes;
  if (tokens === undefined || at === undefined || l.readBytesPerSec === 0) return burst;
  return Math.floor(Math.min(burst, tokens + Math.max(0, Date.now() - at) * l.readBytesPerSec / 1000));
}

function counter(scope: string, field: string, text: string | null): number | undefined {
  return text === null ? undefined : finite(scope, field, text);
}
