/**
 * RATE_LIMITS: the model providers' rate limits, as buckets that every worker shares
 * (src/lib/engine/flow/rate-limiter.ts enforces them, transitions/rate-bucket.lua keeps them).
 *
 *   RATE_LIMITS="openai:gpt-4o-mini=rpm:500,tpm:200000;anthropic:claude=rpm:50,burst:2"
 *
 * Entries are separated by `;`, each `<bucket>=<limits>`; the limits are `rpm:<n>` (requests
 * a minute) and `tpm:<n>` (tokens a minute), either or both, and optionally `burst:<n>` (the
 * bucket's spread: at most ceil(rpm / 60) × n requests and ceil(tpm / 60) × n tokens in any one
 * second; default RATE_LIMIT_BURST), separated by `,`. Nothing else is accepted: a typo in a
 * limit must stop the process at start, not leave a provider unguarded.
 */

/**
 * A bucket's name: what RATE_LIMITS, `ctx.infer`'s rateLimit and the routes call it. It becomes
 * part of a Redis key, so no braces (a Cluster hash tag) and no spaces; `:` and `/` are allowed,
 * for names like `openai:gpt-4o-mini` or `openrouter:meta-llama/llama-3-8b`.
 */
export const BUCKET_NAME = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;

/** How many buckets one deployment may define: each is a label value of the metrics. */
export const MAX_BUCKETS = 100;

/** The largest rpm or tpm accepted: far above any provider's tier, and exact in Lua's numbers. */
export const MAX_LIMIT = 1_000_000_000;

/** The largest burst factor: 60 seconds' share in one second is the whole minute, no spread at all. */
export const MAX_BURST = 60;

/** A bucket's limits: requests and tokens a provider may see in any 60-second window, and the bucket's own burst factor. */
export interface BucketLimit {
  rpm?: number;
  tpm?: number;
  /** Absent: RATE_LIMIT_BURST. */
  burst?: number;
}

/**
 * A bucket's spread: the requests and tokens it grants in any one second, a second's share of
 * the minute (rounded up) times the burst factor. `burst` 60 grants the whole minute at once.
 */
export function perSecond(limit: Readonly<BucketLimit>, burst: number): { requests?: number; tokens?: number } {
  const share = (perMinute: number | undefined) =>
    (perMinute === undefined ? undefined : Math.min(perMinute, Math.ceil(perMinute / 60) * burst));
  return { requests: share(limit.rpm), tokens: share(limit.tpm) };
}

export type RateLimits = ReadonlyMap<string, Readonly<BucketLimit>>;

/** Parses RATE_LIMITS; throws an Error saying which entry is wrong and how. Empty text: no buckets. */
export function parseRateLimits(text: string): RateLimits {
  const buckets = new Map<string, BucketLimit>();
  if (text.trim() === '') return buckets;
  const entries = text.split(';').map((e) => e.trim());
  // One `;` at the end is a habit, not a mistake.
  if (entries.length > 1 && entries[entries.length - 1] === '') entries.pop();
  for (const entry of entries) {
    const at = entry === '' ? 'an empty entry' : JSON.stringify(entry);
    const eq = entry.indexOf('=');
    if (eq < 0) throw new Error(`${at}: expected <bucket>=rpm:<n>,tpm:<n>,burst:<n>`);
    const name = entry.slice(0, eq).trim();
    if (!BUCKET_NAME.test(name)) {
      throw new Error(`${at}: the bucket name must match ${BUCKET_NAME.source} (letters, digits, . _ : / -, at most 128)`);
    }
    if (buckets.has(name)) throw new Error(`${at}: the bucket ${name} is defined twice`);
    const limit: BucketLimit = {};
    for (const part of entry.slice(eq + 1).split(',').map((p) => p.trim())) {
      const m = /^(rpm|tpm|burst):(\d+)$/.exec(part);
      if (!m) throw new Error(`${at}: ${JSON.stringify(part)} is not rpm:<n>, tpm:<n> or burst:<n> (n a whole number)`);
      const [, field, digits] = m as unknown as [string, 'rpm' | 'tpm' | 'burst', string];
      const n = Number(digits);
      const max = field === 'burst' ? MAX_BURST : MAX_LIMIT;
      if (n < 1 || n > max) throw new Error(`${at}: ${field} must be from 1 to ${max}`);
      if (limit[field] !== undefined) throw new Error(`${at}: ${field} is given twice`);
      limit[field] = n;
    }
    if (limit.rpm === undefined && limit.tpm === undefined) throw new Error(`${at}: give rpm:<n>, tpm:<n> or both`);
    buckets.set(name, Object.freeze(limit));
  }
  if (buckets.size > MAX_BUCKETS) throw new Error(`${buckets.size} buckets: at most ${MAX_BUCKETS}`);
  return buckets;
}
