import { randomBytes } from 'node:crypto';
import type { Config } from '../config.ts';
import type {
  CreateScheduleRequest, MissedTickPolicy, ScheduleRunTemplate, ScheduleStatus, ScheduleView,
} from '../contract/schedules.ts';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import type { Transitions } from '../engine/transitions.ts';
import { redisNowMs, type Redis } from '../redis.ts';
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

/** Schedule ids: `sch<time36><hex12>`, short enough that `<id>-<tick ms>` is a session id. */
export function newScheduleId(): string {
  return `sch${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

export class ScheduleStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'SCHEDULES_MAX_PER_SCOPE' | 'SCHEDULE_TEMPLATE_MAX_BYTES'>,
    /** Pause and resume are transitions (lua/schedule-pause.lua, schedule-resume.lua). */
    private readonly transitions: Transitions,
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

  /** Every schedule of the scope (at most SCHEDULES_MAX_PER_SCOPE), oldest first. */
  async list(scope: string): Promise<ScheduleView[]> {
    const sk = this.keys.scope(scope);
    const ids = await this.redis.zrange(sk.schedules, 0, -1);
    if (ids.length === 0) return [];
    const pipe = this.redis.pipeline();
    for (const id of ids) pipe.hgetall(sk.schedule(id));
    const rows = (await pipe.exec()) ?? [];
    return rows.flatMap(([err, h]) => {
      if (err) throw err;
      const rec = parseSchedule(h as Record<string, string>);
      return rec ? [view(rec)] : [];
    });
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
