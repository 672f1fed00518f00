import { z } from 'zod';
import { intMs } from './values.ts';

/** Schedules and bulk operations: how many a scope may hold, and how often every process advances them. */
export const operationVars = {
  /**
   * SCHEDULES_MAX_PER_SCOPE: cron schedules one scope may hold (POST …/schedules; one more is
   * 429 TOO_MANY_SCHEDULES). Every active schedule is an entry each process's scheduler looks
   * at when due, and a schedule firing every second is a run a second; 100 covers a tenant's
   * reports, digests and periodic agents while bounding what one scope can set going.
   */
  SCHEDULES_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(100_000).default(100),
  /**
   * SCHEDULE_TEMPLATE_MAX_BYTES: the most bytes one schedule's run template (its input,
   * metadata, session, agent and runtime, as JSON) may take; a larger one is refused at create
   * with 413 SCHEDULE_TEMPLATE_TOO_LARGE. A scheduled run's input is a prompt or instructions
   * document (a report's brief, a digest's rules): a long one is a few KiB. 64 KiB holds a
   * 48 KiB prompt (about 12,000 tokens) beside the 16 KiB of metadata a submit may carry, so
   * ordinary use never meets it, while a scope's 100 schedules hold at most 6.4 MiB of
   * templates, where a submit's 256 Ki-character input let them hold over 25 MiB.
   */
  SCHEDULE_TEMPLATE_MAX_BYTES: z.coerce.number().int().min(1024).max(16 * 1024 * 1024).default(64 * 1024),
  /**
   * BULK_RUNS_PER_SECOND: runs one scope's bulk operation (cancel or re-run by filter) acts on
   * per second, whatever the number of processes. A cancel is one script of a few commands; 500
   * a second is a small share of one Redis core, so other scopes' submits and claims keep their
   * pace, and 2,000 runs take about four seconds.
   */
  BULK_RUNS_PER_SECOND: z.coerce.number().int().min(1).max(100_000).default(500),
  /**
   * BULK_OPERATIONS_MAX_PER_SCOPE: bulk operations one scope may have running (one more is 429
   * TOO_MANY_OPERATIONS). A scope's operations run one after the other, oldest first.
   */
  BULK_OPERATIONS_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(1_000).default(5),
  /** BULK_POLL_MS: how often every process looks for bulk operations to advance (0: this process advances none). */
  BULK_POLL_MS: intMs(200),
  /**
   * SCHEDULE_POLL_MS: how often every process looks for schedules whose tick is due (0: this
   * process fires none). A tick's run is made within about this long of its time; any process
   * may fire it, and the tick's idempotency key makes it one run however many try.
   */
  SCHEDULE_POLL_MS: intMs(200),
  /**
   * SCHEDULE_MISSED_AFTER_MS: a schedule's tick found later than this after its time was
   * missed (every process or Redis was down), and the schedule's `missed` policy decides about
   * it (skip, or catchUpOne); one found sooner fires, late. Longer than a busy moment's delay,
   * shorter than an outage worth calling one.
   */
  SCHEDULE_MISSED_AFTER_MS: intMs(5_000),
};
