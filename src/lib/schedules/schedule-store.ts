import { randomBytes } from 'node:crypto';
import type { Config } from '../config/index.ts';
import type {
  CreateScheduleRequest, MissedTickPolicy, ScheduleList, ScheduleListOptions, ScheduleRunTemplate, ScheduleStatus, ScheduleView,
} from '../contract/schedules.ts';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import type { ScheduleGateway } from '../transitions/operations-gateway.ts';
import { entriesAfter, fitting, measure, parsePositionCursor, positionCursor, readHashes } from '../redis/listing-page.ts';
import { redisNowMs, type Redis } from '../redis/redis.ts';
import { checkCron, compileCron, fireTimes, NEXT_FIRE_TIMES } from './cron.ts';

/**
 * A scope's cron schedules. Each is a hash under the scope's hash tag (`schedule:<id>`):
 *
 *   id, scope, cron, timezone, missed, run (the template as JSON), status, createdAt,
 *   nextAt      the next tick not yet claimed (epoch ms, Redis time); absent when none is left
 *   pending     a tick claimed whose run is not yet confirmed made (scheduler.ts)
 *   fired, lastTick, lastRunId, lastError
 *
 * `schedules` lists them by creation; `schedules:due` holds the active ones by when a
 * scheduler should look at them next (nextAt, or a pending tick's retry time). The
 * scheduler owns `nextAt` and `pending` once a schedule exists; the routes change `status`.
 */

/** A schedule as stored, parsed. */
export interface ScheduleRecord {
  id: string;
  scope: string;
  cron: string;
  timezone: string;
  missed: MissedTickPolicy;
  run: ScheduleRunTemplate;
  status: ScheduleStatus;
  createdAt: number;
  nextAt?: number;
  pending?: number;
  fired: number;
  lastTick?: number;
  lastRunId?: string;
  lastError?: { tick: number; code: string; message: string };
}

export function parseSchedule(h: Record<string, string>): ScheduleRecord | undefined {
  if (!h.id || !h.scope || !h.cron || !h.run) return undefined;
  const lastError = h.lastError ? JSON.parse(h.lastError) as ScheduleRecord['lastError'] : undefined;
  return {
    id: h.id, scope: h.scope, cron: h.cron, timezone: h.timezone ?? 'UTC',
    missed: h.missed === 'catchUpOne' ? 'catchUpOne' : 'skip',
    run: JSON.parse(h.run) as ScheduleRunTemplate,
    status: h.status === 'paused' ? 'paused' : 'active',
    createdAt: Number(h.createdAt),
    ...(h.nextAt ? { nextAt: Number(h.nextAt) } : {}),
    ...(h.pending ? { pending: Number(h.pending) } : {}),
    fired: Number(h.fired ?? 0),
    ...(h.lastTick ? { lastTick: Number(h.lastTick) } : {}),
    ...(h.lastRunId ? { lastRunId: h.lastRunId } : {}),
    ...(lastError ? { lastError } : {}),
  };
}

/** The fields of a schedule that may be large (JSON a tenant wrote): a page is measured by them. */
const SIZED_FIELDS = ['run', 'lastError'] as const;
/**
 * What a shown schedule takes beyond its sized fields, as a generous bound: its id, scope,
 * cron (at most 200 characters), time zone (64), five fire times, counts, times and the
 * field names around them come to well under this.
 */
const SCHEDULE_OVERHEAD_BYTES = 1024;
/** What a page takes beyond its schedules: `{"schedules":[…],"nextCursor":"…"}` and the commas between them. */
const PAGE_OVERHEAD_BYTES = 512;

/** Schedule ids: `sch<time36><hex12>`, short enough that `<id>-<tick ms>` is a session id. */
export function newScheduleId(): string {
  return `sch${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

export class ScheduleStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'SCHEDULES_MAX_PER_SCOPE' | 'SCHEDULE_TEMPLATE_MAX_BYTES' | 'PAGE_MAX_BYTES'>,
    /** Pause and resume are transitions (transitions/schedule-pause.lua, schedule-resume.lua). */
    private readonly transitions: ScheduleGateway,
  ) {}

  async create(scope: string, req: CreateScheduleRequest): Promise<ScheduleView> {
    // Measured as it is stored, before anything is read or written: every listing page and
    // every tick reads the template whole.
    const template = JSON.stringify(req.run);
    const templateBytes = Buffer.byteLength(template);
    if (templateBytes > this.config.SCHEDULE_TEMPLATE_MAX_BYTES) {
      throw new BatonError('SCHEDULE_TEMPLATE_TOO_LARGE', undefined, [{
        path: 'body.run',
        message: `the template is ${templateBytes} bytes as JSON; SCHEDULE_TEMPLATE_MAX_BYTES is ${this.config.SCHEDULE_TEMPLATE_MAX_BYTES}`,
      }]);
    }
    const timezone = req.timezone ?? 'UTC';
    const now = await redisNowMs(this.redis);
    const cron = checkCron(req.cron, timezone, now);
    const sk = this.keys.scope(scope);
    // Read before the write: creates racing at the cap may pass it by the few in flight.
    if (await this.redis.zcard(sk.schedules) >= this.config.SCHEDULES_MAX_PER_SCOPE) throw new BatonError('TOO_MANY_SCHEDULES');
    const id = newScheduleId();
    const nextAt = cron.after(now)!;
    // The work list first: a schedule is never in a scope the schedulers do not look at.
    await this.redis.sadd(this.keys.scheduleScopes, scope);
    await this.redis.multi()
      .hset(sk.schedule(id), {
        id, scope, cron: req.cron, timezone, missed: req.missed ?? 'skip', run: template,
        status: 'active', createdAt: now, nextAt, fired: 0,
      })
      .zadd(sk.schedules, now, id)
      .zadd(sk.schedulesDue, nextAt, id)
      .exec();
    return this.get(scope, id);
  }

  async get(scope: string, id: string): Promise<ScheduleView> {
    const rec = parseSchedule(await this.redis.hgetall(this.keys.scope(scope).schedule(id)));
    if (!rec) throw new BatonError('SCHEDULE_NOT_FOUND');
    return view(rec);
  }

  /**
   * A page of the scope's schedules, oldest first: at most `limit` of them and PAGE_MAX_BYTES
   * (the first whatever its size). Bounded in Redis too: the page's ids (and one more, to tell
   * whether another page follows) are read by position, their templates measured with HSTRLEN
   * (which reads none of them), and only the schedules that fit are read whole. `nextCursor`
   * is `<creation ms>_<id>` of the page's last schedule: a position, so schedules made or
   * deleted meanwhile move no other's place.
   */
  async list(scope: string, o: ScheduleListOptions & { limit: number }): Promise<ScheduleList> {
    const sk = this.keys.scope(scope);
    const after = o.cursor === undefined ? undefined : parsePositionCursor(o.cursor);
    const entries = await entriesAfter(this.redis, sk.schedules, after, o.limit + 1, 'oldest');
    const wanted = entries.slice(0, o.limit);
    const sizes = await measure(this.redis, wanted.map((e) => sk.schedule(e.id)), SIZED_FIELDS, SCHEDULE_OVERHEAD_BYTES);
    const page = wanted.slice(0, fitting(sizes, this.config.PAGE_MAX_BYTES - PAGE_OVERHEAD_BYTES));
    const hashes = await readHashes(this.redis, page.map((e) => sk.schedule(e.id)));
    // A schedule deleted since its id was read is left out (its place is still the cursor's).
    const schedules = hashes.flatMap((h) => {
      const rec = parseSchedule(h);
      return rec ? [view(rec)] : [];
    });
    const last = page[page.length - 1];
    return { schedules, nextCursor: page.length < entries.length && last ? positionCursor(last) : null };
  }

  /** Pauses the schedule: out of the due index (a tick already claimed still makes its run). */
  async pause(scope: string, id: string): Promise<ScheduleView> {
    if (await this.transitions.pauseSchedule(scope, id) === 'not-found') throw new BatonError('SCHEDULE_NOT_FOUND');
    return this.get(scope, id);
  }

  /** Resumes the schedule from its first tick after now: ticks while it was paused are not made up. */
  async resume(scope: string, id: string): Promise<ScheduleView> {
    const h = await this.redis.hmget(this.keys.scope(scope).schedule(id), 'cron', 'timezone');
    if (!h[0]) throw new BatonError('SCHEDULE_NOT_FOUND');
    const now = await redisNowMs(this.redis);
    const next = compileCron(h[0], h[1] ?? 'UTC').after(now);
    if (await this.transitions.resumeSchedule(scope, id, next) === 'not-found') throw new BatonError('SCHEDULE_NOT_FOUND');
    return this.get(scope, id);
  }

  /** Deletes the schedule; a tick already claimed may still make its run. */
  async delete(scope: string, id: string): Promise<void> {
    const sk = this.keys.scope(scope);
    const [[, gone] = []] = (await this.redis.multi()
      .del(sk.schedule(id)).zrem(sk.schedules, id).zrem(sk.schedulesDue, id).exec()) ?? [];
    if (Number(gone) === 0) throw new BatonError('SCHEDULE_NOT_FOUND');
  }
}

function view(rec: ScheduleRecord): ScheduleView {
  const iso = (ms: number) => new Date(ms).toISOString();
  // From the next tick not yet claimed (due now at the latest), so a late tick is shown, not hidden.
  const next = rec.status === 'active' && rec.nextAt !== undefined
    ? [rec.nextAt, ...fireTimes(compileCron(rec.cron, rec.timezone), rec.nextAt, NEXT_FIRE_TIMES - 1)]
    : [];
  return {
    id: rec.id, scope: rec.scope, cron: rec.cron, timezone: rec.timezone, missed: rec.missed, status: rec.status,
    run: rec.run, createdAt: iso(rec.createdAt),
    nextFireTimes: next.map(iso),
    fired: rec.fired,
    ...(rec.lastTick !== undefined ? { lastTick: iso(rec.lastTick) } : {}),
    ...(rec.lastRunId !== undefined ? { lastRunId: rec.lastRunId } : {}),
    ...(rec.lastError ? { lastError: { ...rec.lastError, tick: iso(rec.lastError.tick) } } : {}),
  };
}
