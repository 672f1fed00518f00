import type { ScriptCaller } from './caller.ts';
import { notFound, type Replies } from './reply.ts';
import { scheduleKeys } from './schedule-pause.ts';

export const REPLY = { Resumed: {}, NotFound: {} } satisfies Replies;

/** Resumes a schedule from `nextAt` (schedule-resume.lua), its first tick after now (undefined: it has none left). */
export async function resumeSchedule(c: ScriptCaller, scope: string, id: string, nextAt: number | undefined): Promise<'active' | 'not-found'> {
  const reply = await c.call('schedule-resume', REPLY, scope, scheduleKeys(c, scope, id), { id, nextAt });
  return reply.refused ? notFound('schedule-resume', reply.refused) : 'active';
}
