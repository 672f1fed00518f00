import type { Config } from '../config/index.ts';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import { PollLoop } from '../redis/poll-loop.ts';
import { redisNowMs, type Redis } from '../redis/redis.ts';
import type { Submissions, SubmitRequest } from '../engine/submissions.ts';
import type { TickOutcome } from '../transitions/schedule-done.ts';
import type { ScheduleGateway } from '../transitions/operations-gateway.ts';
import { compileCron, splitDue, type CompiledCron } from './cron.ts';
import { parseSchedule, type ScheduleRecord } from './schedule-store.ts';

/**
 * A claimed tick whose run is not confirmed made is tried again after this long, by any process.
 * Short of a second, so a process killed holding a per-second tick does not hold up the next.
 */
export const PENDING_RETRY_MS = 500;
/** Due schedules taken per scope and poll: the rest at the next poll, so one scope cannot stall one. */
const DUE_PER_POLL = 100;
/** Ticks of one schedule one process fires in a row when it finds several due (the rest at its next poll). */
const TICKS_PER_VISIT = 20;
/** Compiled expressions kept (dropped whole when it grows past this). */
const CRON_CACHE_MAX = 1_000;
/** Submit failures that are Redis's or this process's, not the tenant's: the tick is tried again. */
const TRANSIENT = new Set(['REDIS_UNAVAILABLE', 'INTERNAL', 'CLIENT_CLOSED']);
/**
 * Refusals by a limit that frees up with time (the scope's submit rate, its schema checks):
 * the tick is tried again while it is not missed (SCHEDULE_MISSED_AFTER_MS), then refused.
 * Any other refusal is the tenant's state (a full session history, a drained runtime...): the
 * tick makes no run and says why.
 */
const WAIT_FOR = new Set(['RATE_LIMITED', 'SCHEMA_CHECKS_BUSY']);

/** The idempotency key of a schedule's tick: the same tick submitted twice is one run. */
export function tickKey(scheduleId: string, tick: number): string {
  return `schedule:${scheduleId}:${tick}`;
}

/**
 * Fires schedules' ticks; every API and worker process runs one, and none leads.
 *
 * A tick is made a run in two steps, each safe to repeat or to lose:
 * 1. claim (transitions/schedule-claim.lua): if the schedule's nextAt is still the tick this process
 *    read, move nextAt to the tick after now and mark the tick to fire `pending`. Of processes
 *    racing on a tick, one claims it; the others read the new nextAt.
 * 2. submit the tick's run through the door every run takes (Submissions.submit: the registry's
 *    warnings, tracing, the scheduled-run cap, the scope's rate limit, its session queue, its
 *    slots) with the idempotency key `schedule:<id>:<tick>`, then clear `pending`
 *    (transitions/schedule-done.lua). A process killed (or Redis gone) in between leaves the tick
 *    pending; after PENDING_RETRY_MS any process submits it again, and the key makes it the
 *    same run. So each tick is at most one run, and a claimed tick is made one in the end.
 *
 * Ticks are read in Redis time. A tick found at most SCHEDULE_MISSED_AFTER_MS after its time
 * fires, however many are due (a busy moment delays ticks; it does not drop them). Ticks found
 * later than that were missed (every process down, Redis down): `skip` fires none of them,
 * `catchUpOne` the latest of them; the ticks after them fire as usual. A tick the scope's
 * submit rate holds back stays pending and is tried again for as long: a limit that frees up
 * within the window delays the tick; one that does not refuses it (`lastError`).
 */
export class Scheduler {
  private readonly loop: PollLoop;
  private readonly crons = new Map<string, CompiledCron>();
  /** Ticks this process made runs of (tests and logs). */
  fired = 0;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'SCHEDULE_POLL_MS' | 'SCHEDULE_MISSED_AFTER_MS'>,
    /** The claim and the done mark (transitions/schedule-claim.lua, schedule-done.lua). */
    private readonly transitions: ScheduleGateway,
    /** The submit door (submissions.ts), with the scope's submit rate limit. */
    private readonly submissions: Submissions,
    private readonly log: Logger,
  ) {
    this.loop = new PollLoop(config.SCHEDULE_POLL_MS, () => this.poll(), log, 'schedule poll');
  }

  start(): void {
    this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }

  /** One pass: every scope with schedules, its schedules due at Redis's now. */
  async poll(): Promise<void> {
    // Redis's time only once there is a schedule to look at: an idle poll is one SSCAN.
    let now: number | undefined;
    let cursor = '0';
    do {
      const [next, scopes] = await this.redis.sscan(this.keys.scheduleScopes, cursor, 'COUNT', 200);
      cursor = next;
      if (scopes.length === 0) continue;
      now ??= await redisNowMs(this.redis);
      // One range read per scope (scopes live in different Cluster slots, so no pipeline across them).
      for (const scope of scopes) {
        const due = await this.redis.zrangebyscore(this.keys.scope(scope).schedulesDue, '-inf', now, 'LIMIT', 0, DUE_PER_POLL);
        for (const id of due) await this.due(scope, id, now);
      }
    } while (cursor !== '0');
  }

  /** A schedule the due index says to look at: its pending tick finished, then its due ticks claimed, a few in a row. */
  private async due(scope: string, id: string, now: number): Promise<void> {
    for (let i = 0; i < TICKS_PER_VISIT; i++) {
      if (!await this.tick(scope, id, now)) return;
    }
  }

  /** One step of `due`: whether there may be another tick due now. */
  private async tick(scope: string, id: string, now: number): Promise<boolean> {
    const sk = this.keys.scope(scope);
    const rec = parseSchedule(await this.redis.hgetall(sk.schedule(id)));
    if (!rec) {
      await this.redis.zrem(sk.schedulesDue, id);
      return false;
    }
    if (rec.pending !== undefined) return this.fireTick(rec, rec.pending, now);
    if (rec.nextAt === undefined || rec.nextAt > now) return false;
    const cron = this.cron(rec);
    const { latestMissed, next: first } = splitDue(cron, rec.nextAt, now, this.config.SCHEDULE_MISSED_AFTER_MS);
    // None missed: the due tick fires, and the next is the one after it. Some missed: the
    // policy decides about them, and the next is the first not missed.
    const missed = latestMissed !== undefined;
    const fire = !missed ? rec.nextAt : rec.missed === 'catchUpOne' ? latestMissed : undefined;
    const next = !missed ? cron.after(rec.nextAt) : first;
    const claimed = await this.transitions.claimTick(scope, id, { expected: rec.nextAt, next, fire, retryAt: now + PENDING_RETRY_MS });
    if (!claimed) return false;
    if (missed) {
      this.log.info({ scope, scheduleId: id, from: rec.nextAt, to: latestMissed, missed: rec.missed }, 'schedule ticks missed');
    }
    if (fire !== undefined && !await this.fireTick(rec, fire, now)) return false;
    return next !== undefined && next <= now;
  }

  /** Submits a claimed tick's run (again, after a crash: the same run) and marks the tick done; false when left pending. */
  private async fireTick(rec: ScheduleRecord, tick: number, now: number): Promise<boolean> {
    let outcome: TickOutcome;
    try {
      const { run, created } = await this.submissions.submit(tickRequest(rec, tick));
      outcome = { runId: run.id };
      if (created) this.fired++;
    } catch (err) {
      if (!(err instanceof BatonError) || TRANSIENT.has(err.code)) {
        this.log.warn({ scope: rec.scope, scheduleId: rec.id, tick, err: (err as Error).message }, 'schedule tick not submitted; tried again later');
        return false;
      }
      if (WAIT_FOR.has(err.code) && now - tick <= this.config.SCHEDULE_MISSED_AFTER_MS) {
        await this.holdBack(rec, tick, now, err.retryAfterMs);
        return false;
      }
      outcome = { refused: { code: err.code, message: err.message } };
      this.log.warn({ scope: rec.scope, scheduleId: rec.id, tick, code: err.code }, 'schedule tick refused by the submit');
    }
    return this.transitions.tickDone(rec.scope, rec.id, tick, outcome);
  }

  /**
   * A tick a limit held back is looked at again when the limit says (its Retry-After), not at
   * every poll of every process: the due index's score moves there, no later than just past
   * the tick's window, where it is refused. Only ever later (GT), and only while the schedule
   * is in the index (XX): a tick another process made meanwhile keeps the score it set.
   */
  private async holdBack(rec: ScheduleRecord, tick: number, now: number, retryAfterMs: number | undefined): Promise<void> {
    const windowEnd = tick + this.config.SCHEDULE_MISSED_AFTER_MS + 1;
    const retryAt = Math.min(now + Math.max(PENDING_RETRY_MS, retryAfterMs ?? 0), Math.max(windowEnd, now + PENDING_RETRY_MS));
    await this.redis.zadd(this.keys.scope(rec.scope).schedulesDue, 'XX', 'GT', retryAt, rec.id);
    this.log.info({ scope: rec.scope, scheduleId: rec.id, tick, retryAt }, 'schedule tick held back by a limit; tried again then');
  }

  private cron(rec: ScheduleRecord): CompiledCron {
    const id = `${rec.timezone} ${rec.cron}`;
    let cron = this.crons.get(id);
    if (!cron) {
      if (this.crons.size >= CRON_CACHE_MAX) this.crons.clear();
      cron = compileCron(rec.cron, rec.timezone);
      this.crons.set(id, cron);
    }
    return cron;
  }
}

/**
 * The submit a tick makes: the template's, in its session or the tick's own, keyed by the tick.
 * `awaitAgent`: a schedule is made ahead of the agents it runs, and its ticks come when nobody
 * watches, so a tick for an agent its runtime never offered queues (its first status event says
 * so; it fails UNKNOWN_AGENT after AGENT_GRACE_MS if none starts) instead of being refused.
 */
export function tickRequest(rec: ScheduleRecord, tick: number): SubmitRequest {
  const t = rec.run;
  return {
    scope: rec.scope,
    sessionId: t.sessionId ?? `${rec.id}-${tick}`,
    input: t.input,
    runtime: t.runtime ?? 'default',
    agent: t.agent ?? 'echo',
    metadata: { ...t.metadata, scheduleId: rec.id, scheduledFor: new Date(tick).toISOString() },
    idempotencyKey: tickKey(rec.id, tick),
    multitask: 'enqueue',
    awaitAgent: true,
  };
}
