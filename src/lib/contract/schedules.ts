/**
 * Cron schedules: `POST /v1/scopes/{scope}/schedules` and the routes under it
 * (docs/schedules.md). A schedule makes one run per tick of its cron expression.
 */

/** What a schedule does about ticks it missed (no process fired them in time): `skip` none, `catchUpOne` the latest. */
export const MISSED_TICK_POLICIES = ['skip', 'catchUpOne'] as const;
export type MissedTickPolicy = (typeof MISSED_TICK_POLICIES)[number];

export const SCHEDULE_STATUSES = ['active', 'paused'] as const;
export type ScheduleStatus = (typeof SCHEDULE_STATUSES)[number];

/** The run each tick makes: a submit's fields, with a fixed session or a new one per tick. */
export interface ScheduleRunTemplate {
  /** Every tick's run queues in this session; give it or `sessionPerTick`, not both. */
  sessionId?: string;
  /** Each tick's run gets a session of its own, `<scheduleId>-<tick ms>`. */
  sessionPerTick?: true;
  input: { content: string };
  runtime?: string;
  agent?: string;
  metadata?: Record<string, unknown>;
}

/** Body of `POST /v1/scopes/{scope}/schedules`. */
export interface CreateScheduleRequest {
  /** Five fields (minute first) or six (second first), as croner reads them. */
  cron: string;
  /** IANA time zone the expression is read in; default `UTC`. */
  timezone?: string;
  /** Default `skip`. */
  missed?: MissedTickPolicy;
  run: ScheduleRunTemplate;
}

/** A schedule as the API shows it. */
export interface ScheduleView {
  id: string;
  scope: string;
  cron: string;
  timezone: string;
  missed: MissedTickPolicy;
  status: ScheduleStatus;
  run: ScheduleRunTemplate;
  createdAt: string;
  /** The next five fire times (ISO), from now; empty while paused. */
  nextFireTimes: string[];
  /** Runs its ticks made so far. */
  fired: number;
  /** The latest tick that made a run, and that run. */
  lastTick?: string;
  lastRunId?: string;
  /** The latest tick whose submit was refused (a scope's rate limit, a full session history...), and why. */
  lastError?: { tick: string; code: string; message: string };
}

/** Query of `GET /v1/scopes/{scope}/schedules`: a page of at most `limit` schedules, after `cursor`. */
export interface ScheduleListOptions {
  /** Default 50, at most 200. */
  limit?: number;
  /** The previous page's nextCursor. */
  cursor?: string;
}

/**
 * Answer of `GET /v1/scopes/{scope}/schedules`: a page of the scope's schedules, oldest first,
 * of at most `limit` schedules and PAGE_MAX_BYTES (a schedule larger than that comes alone).
 */
export interface ScheduleList {
  schedules: ScheduleView[];
  /** Set when more schedules follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`. */
  nextCursor: string | null;
}
