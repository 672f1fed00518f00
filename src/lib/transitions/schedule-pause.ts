import type { NamedKeys } from './scripts.ts';
import type { ScriptCaller } from './caller.ts';
import { notFound, type Replies } from './reply.ts';

export const REPLY = { Paused: {}, NotFound: {} } satisfies Replies;

/** The keys of a schedule and its scope's due index (schedule-*.lua). */
export function scheduleKeys(c: ScriptCaller, scope: string, id: string): NamedKeys {
  const sk = c.keys.scope(scope);
  return { schedule: sk.schedule(id), due: sk.schedulesDue };
}

/** Pauses a schedule (schedule-pause.lua): out of the due index; a tick it claimed already still makes its run. */
export async function pauseSchedule(c: ScriptCaller, scope: string, id: string): Promise<'paused' | 'not-found'> {
  const reply = await c.call('schedule-pause', REPLY, scope, scheduleKeys(c, scope, id), { id });
  return reply.refused ? notFound('schedule-pause', reply.refused) : 'paused';
}
