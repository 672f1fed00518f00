import { z } from 'zod';
import { MISSED_TICK_POLICIES, SCHEDULE_STATUSES } from '../lib/contract/index.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { emptyBody, idSchema, listRunsQuery, scopeParams, submitBody } from './schemas.ts';

/**
 * Cron schedules (src/lib/schedules; docs/schedules.md). A schedule makes runs for as long as
 * it stands, so an admin key of the scope makes, pauses, resumes and deletes one; any key of
 * the scope reads them.
 */

export const scheduleParams = z.strictObject({ scope: idSchema, scheduleId: idSchema });

/** The run each tick makes: a submit's fields, in a fixed session or one per tick. */
const runTemplate = z.strictObject({
  sessionId: idSchema.optional(),
  sessionPerTick: z.literal(true).optional(),
  input: z.strictObject({ content: submitBody.shape.input.shape.content }),
  runtime: idSchema.optional(),
  agent: idSchema.optional(),
  metadata: submitBody.shape.metadata,
}).superRefine((t, ctx) => {
  if ((t.sessionId === undefined) === (t.sessionPerTick === undefined)) {
    ctx.addIssue({ code: 'custom', path: ['sessionId'], message: 'give sessionId or sessionPerTick: true, one of them' });
  }
  // scheduleId and scheduledFor are the tick's own (scheduler.ts).
  if (t.metadata && ('scheduleId' in t.metadata || 'scheduledFor' in t.metadata)) {
    ctx.addIssue({ code: 'custom', path: ['metadata'], message: 'scheduleId and scheduledFor are set by the schedule' });
  }
});

export const createScheduleBody = z.strictObject({
  cron: z.string().min(1).max(200).describe('five fields (minute first), six (second first), or a nickname such as @hourly'),
  timezone: z.string().min(1).max(64).optional().describe('IANA time zone; default UTC'),
  missed: z.enum(MISSED_TICK_POLICIES).optional().describe('ticks no process fired in time: skip (default) or catchUpOne'),
  run: runTemplate,
});

const iso = z.string().describe('ISO 8601 time');

export const scheduleResponse = z.object({
  id: z.string(),
  scope: z.string(),
  cron: z.string(),
  timezone: z.string(),
  missed: z.enum(MISSED_TICK_POLICIES),
  status: z.enum(SCHEDULE_STATUSES),
  run: z.object({
    sessionId: z.string().optional(), sessionPerTick: z.literal(true).optional(), input: z.object({ content: z.string() }),
    runtime: z.string().optional(), agent: z.string().optional(), metadata: z.record(z.string(), z.unknown()).optional(),
  }),
  createdAt: iso,
  nextFireTimes: z.array(iso).describe('the next five ticks; empty while paused'),
  fired: z.number().int().describe('runs its ticks made'),
  lastTick: iso.optional(),
  lastRunId: z.string().optional(),
  lastError: z.object({ tick: iso, code: z.string(), message: z.string() }).optional()
    .describe('the latest tick the submit refused (the scope’s rate limit, a full session history…)'),
});

/** GET …/schedules: a page of at most `limit` schedules after `cursor` (the runs listing's count range and cursor form). */
export const listSchedulesQuery = z.strictObject({
  limit: listRunsQuery.shape.limit,
  /** The previous page's nextCursor: `<creation ms>_<schedule id>` of its last schedule. */
  cursor: listRunsQuery.shape.cursor,
});

export const scheduleListResponse = z.object({
  schedules: z.array(scheduleResponse),
  nextCursor: z.string().nullable().describe('set when more schedules follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`'),
});

const noStore = { 'cache-control': 'no-store' };

export const scheduleRoutes: RouteSpec[] = [
  route({
    method: 'post', path: `${SCOPE}/schedules`,
    summary: 'Make a cron schedule: each tick submits one run from the template (an admin key).',
    access: 'admin', params: scopeParams, body: createScheduleBody,
    ok: { 201: { description: 'the schedule', schema: scheduleResponse } },
    errors: ['TOO_MANY_SCHEDULES', 'SCHEDULE_TEMPLATE_TOO_LARGE'],
    async handler({ params: { scope }, body }, d) {
      return { status: 201, headers: noStore, body: await d.schedules.create(scope, body) };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/schedules`,
    summary: "The scope's schedules, oldest first: a page of at most `limit` schedules and PAGE_MAX_BYTES.",
    access: 'client', params: scopeParams, query: listSchedulesQuery, readCost: true,
    ok: { 200: { description: 'a page of schedules', schema: scheduleListResponse } },
    async handler({ params: { scope }, query }, d) {
      return { headers: noStore, body: await d.schedules.list(scope, query) };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/schedules/:scheduleId`, summary: 'A schedule, with its next five fire times.',
    access: 'client', params: scheduleParams,
    ok: { 200: { description: 'the schedule', schema: scheduleResponse } }, errors: ['SCHEDULE_NOT_FOUND'],
    async handler({ params: { scope, scheduleId } }, d) {
      return { headers: noStore, body: await d.schedules.get(scope, scheduleId) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/schedules/:scheduleId/pause`, summary: 'Pause a schedule: no tick fires until it is resumed.',
    access: 'admin', params: scheduleParams, body: emptyBody,
    ok: { 200: { description: 'the schedule, paused', schema: scheduleResponse } }, errors: ['SCHEDULE_NOT_FOUND'],
    async handler({ params: { scope, scheduleId } }, d) {
      return { headers: noStore, body: await d.schedules.pause(scope, scheduleId) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/schedules/:scheduleId/resume`,
    summary: 'Resume a schedule from its first tick after now (ticks while paused are not made up).',
    access: 'admin', params: scheduleParams, body: emptyBody,
    ok: { 200: { description: 'the schedule, active', schema: scheduleResponse } }, errors: ['SCHEDULE_NOT_FOUND'],
    async handler({ params: { scope, scheduleId } }, d) {
      return { headers: noStore, body: await d.schedules.resume(scope, scheduleId) };
    },
  }),
  route({
    method: 'delete', path: `${SCOPE}/schedules/:scheduleId`, summary: 'Delete a schedule; runs it made stay.',
    access: 'admin', params: scheduleParams,
    ok: { 204: { description: 'deleted' } }, errors: ['SCHEDULE_NOT_FOUND'],
    async handler({ params: { scope, scheduleId } }, d) {
      await d.schedules.delete(scope, scheduleId);
      return { status: 204 };
    },
  }),
];
