import type { Config } from '../../config/index.ts';
import type { Keys } from '../../keys.ts';
import type { Logger } from '../../logger.ts';
import { isConnectionLoss, type Redis } from '../../redis/redis.ts';
import type { WorkerRegistry } from './worker-registry.ts';
import type { FairLevel } from '../../transitions/caller.ts';
import type { SweeperGateway } from '../../transitions/sweeper-gateway.ts';

/**
 * Weighted fair sharing of the workers' slots across scopes.
 *
 * A scope's slot limit is its `maxActive`, and never more than the live workers' slots (more
 * could only wait in BullMQ, ahead of other scopes' runs). While the scopes' runnable runs (holding a slot or
 * parked for one) are more than the live workers' slots, each scope is also held to its share:
 * `ceil(level × weight)`, at least 1, where the water level is the one at which the scopes'
 * wants (runnable runs, up to maxActive) shared by weight fill the workers' slots exactly
 * (max-min fairness: a scope wanting less than its share keeps what it wants, the rest is
 * shared among the others by weight). The share bounds only the starting of runs: a run that
 * started runs to its end, so a scope over its share (the level fell) gives slots back as its
 * runs end, and a scope with work waits at most for one of the other scopes' runs to end.
 *
 * One process at a time works the level out, every FAIR_SHARE_INTERVAL_MS (a lock in Redis),
 * from each scope's `meta` (active, parked) and `limits` (weight, maxActive), and the live
 * workers' concurrency summed over every runtime; it keeps the level in Redis for three
 * intervals, so a level nobody renews (no process left to work it out) lapses to "no
 * contention". Every process reads it once per interval and passes it to the transitions
 * (O.level), whose Lua applies it to the scope of the call (transitions/lib/limits.lua, scopeLimits). With
 * several runtimes the capacity is their sum: the shares are exact when the scopes contend for
 * the same runtimes, and approximate when they use disjoint ones.
 */

export interface ScopeDemand {
  /** Runs holding a slot or parked for one. */
  runnable: number;
  maxActive: number;
  weight: number;
}

/**
 * The water level (slots per unit of weight) at which the wants of `scopes` fill `capacity`
 * slots; undefined when they fit (no contention) or no worker is live.
 */
export function waterLevel(capacity: number, scopes: readonly ScopeDemand[]): number | undefined {
  const wants = scopes
    .map((s) => ({ want: Math.min(s.runnable, s.maxActive), weight: s.weight }))
    .filter((s) => s.want > 0)
    .sort((a, b) => a.want / a.weight - b.want / b.weight);
  if (capacity <= 0 || wants.reduce((n, s) => n + s.want, 0) <= capacity) return undefined;
  let left = capacity;
  let weights = wants.reduce((n, s) => n + s.weight, 0);
  for (const s of wants) {
    // Everyone left wants more than this level gives: it is the level.
    if (s.want / s.weight > left / weights) break;
    left -= s.want;
    weights -= s.weight;
  }
  return left / weights;
}

/** A scope's share of the workers' slots at `level` (transitions/lib/limits.lua works it out the same way). */
export function shareAt(level: number, weight: number): number {
  return Math.max(1, Math.ceil(level * weight - 1e-9));
}

export class FairShare {
  private current: FairLevel = {};
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly me = `${process.pid}-${Math.random().toString(36).slice(2)}`;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly registry: WorkerRegistry,
    private readonly transitions: SweeperGateway,
    private readonly log: Logger,
  ) {}

  /** What this process last read: the level (absent: no contention) and the live workers' slots (absent: none, or sharing is off). */
  level(): FairLevel {
    return this.current;
  }

  start(): void {
    if (this.config.FAIR_SHARE_INTERVAL_MS === 0) return;
    this.timer = setTimeout(() => this.loop(), 0);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private loop(): void {
    this.running = this.tick()
      // Redis away: its connection says so once (redis.ts), not each pass.
      .catch((err) => { if (!isConnectionLoss(err)) this.log.warn({ err: (err as Error).message }, 'fair share pass failed'); })
      .finally(() => {
        this.running = undefined;
        if (this.timer) {
          this.timer = setTimeout(() => this.loop(), this.config.FAIR_SHARE_INTERVAL_MS);
          this.timer.unref();
        }
      });
  }

  /** Works the level out if this process holds the lock for this interval, then reads it. */
  async tick(): Promise<void> {
    const interval = Math.max(1, this.config.FAIR_SHARE_INTERVAL_MS);
    const lock = await this.redis.set(`${this.keys.fairShare}:lock`, this.me, 'PX', interval, 'NX');
    if (lock === 'OK') await this.workOut(3 * interval);
    const raw = await this.redis.get(this.keys.fairShare);
    this.current = raw === null ? {} : (JSON.parse(raw) as FairLevel);
  }

  /** One pass: the level from every scope's demand; scopes that may start more are filled. */
  async workOut(keepMs: number): Promise<number | undefined> {
    const capacity = (await this.registry.runtimes()).reduce((n, rt) => n + rt.concurrency, 0);
    const demands = new Map<string, ScopeDemand & { active: number; parked: number }>();
    for await (const c of scopeCounts(this.redis, this.keys, this.config)) {
      if (c.active + c.parked > 0) demands.set(c.scope, { ...c, runnable: c.active + c.parked });
    }
    const level = waterLevel(capacity, [...demands.values()]);
    this.current = capacity > 0 ? { ...(level === undefined ? {} : { level }), capacity } : {};
    if (capacity === 0) await this.redis.del(this.keys.fairShare);
    else await this.redis.set(this.keys.fairShare, JSON.stringify(this.current), 'PX', keepMs);
    // A scope with parked runs and room under its new limit gets them started now rather than
    // at its next run's end.
    for (const [scope, d] of demands) {
      const limit = Math.min(d.maxActive, capacity || Infinity, level === undefined ? Infinity : shareAt(level, d.weight));
      if (d.parked > 0 && d.active < limit) await this.transitions.fill(scope);
    }
    return level;
  }
}

/** Which limit holds a scope's parked runs back. */
export const HELD_BY = ['maxActive', 'share', 'maxActivePerKey'] as const;
export type HeldBy = (typeof HELD_BY)[number];

export interface HeldBack {
  /** The water level in force (undefined: no contention) and the live workers' slots (0: none known). */
  level: number | undefined;
  capacity: number;
  /** Parked runs summed over the scopes, by the limit that holds their scope back. */
  parked: Record<HeldBy, number>;
  /** Runs holding a slot, summed over the scopes. */
  active: number;
  /** Per scope (only when asked for: one series per tenant). */
  scopes?: Map<string, { active: number; parked: number; heldBy: HeldBy }>;
}

/**
 * The runs the limits hold back, read at scrape time (one pipelined read per 500 scopes). A
 * scope's parked runs are put down to its binding limit: maxActive when its active runs reach
 * it, else its fair share when they reach that, else maxActivePerKey (runs parked while the
 * scope has free slots wait for their key's).
 */
export async function heldBack(redis: Redis, keys: Keys, config: Config, perScope: boolean): Promise<HeldBack> {
  const raw = await redis.get(keys.fairShare);
  const fair = raw === null ? {} : (JSON.parse(raw) as FairLevel);
  const out: HeldBack = {
    level: fair.level, capacity: fair.capacity ?? 0, active: 0,
    parked: { maxActive: 0, share: 0, maxActivePerKey: 0 }, ...(perScope ? { scopes: new Map() } : {}),
  };
  for await (const c of scopeCounts(redis, keys, config)) {
    out.active += c.active;
    if (c.active + c.parked === 0) continue;
    const maxActive = Math.min(c.maxActive, out.capacity || Infinity);
    const share = out.level === undefined ? Infinity : shareAt(out.level, c.weight);
    const heldBy: HeldBy = c.active >= maxActive ? 'maxActive' : c.active >= share ? 'share' : 'maxActivePerKey';
    out.parked[heldBy] += c.parked;
    out.scopes?.set(c.scope, { active: c.active, parked: c.parked, heldBy });
  }
  return out;
}

/**
 * Every scope's slot counts (`meta`: active, parked; never below 0) and the limits the fair
 * share reads (`limits`: weight, maxActive, else their defaults): one pipelined read per 500 scopes.
 */
async function* scopeCounts(redis: Redis, keys: Keys, config: Config): AsyncGenerator<{
  scope: string; active: number; parked: number; weight: number; maxActive: number;
}> {
  let cursor = '0';
  do {
    const [next, scopes] = await redis.sscan(keys.scopes, cursor, 'COUNT', 500);
    cursor = next;
    const pipe = redis.pipeline();
    for (const scope of scopes) {
      pipe.hmget(keys.scope(scope).meta, 'active', 'parked');
      pipe.hmget(keys.scope(scope).limits, 'weight', 'maxActive');
    }
    const replies = (await pipe.exec()) ?? [];
    for (const [i, scope] of scopes.entries()) {
      const [meta, limits] = [replies[2 * i], replies[2 * i + 1]].map(([err, v]) => {
        if (err) throw err;
        return v as (string | null)[];
      });
      yield {
        scope,
        active: Math.max(0, Number(meta[0] ?? 0)),
        parked: Math.max(0, Number(meta[1] ?? 0)),
        weight: Number(limits[0] ?? config.SCOPE_WEIGHT),
        maxActive: Number(limits[1] ?? config.MAX_ACTIVE_PER_SCOPE),
      };
    }
  } while (cursor !== '0');
}
