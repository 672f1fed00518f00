import type { ScriptCaller } from './caller.ts';
import { unexpected, type Replies } from './reply.ts';
import { scheduleKeys } from './schedule-pause.ts';
import { Outcome } from './script-codes.ts';

/** A cron schedule's due tick to claim (schedule-claim.lua), as the scheduler worked it out. */
export interface TickClaim {
  /** The schedule's nextAt as the scheduler read it: the claim holds only while it still is. */
  expected: number;
  /** The schedule's nextAt after the claim (absent: its expression has no tick left). */
  next?: number;
  /** The tick to fire (absent: none, the missed ticks are skipped). */
  fire?: number;
  /** When a fired tick whose run is not confirmed made is looked at again. */
  retryAt: number;
}

export const REPLY = { Claimed: {}, NotClaimed: {} } satisfies Replies;

/** Claims a schedule's due tick, once among racing processes (schedule-claim.lua). Returns whether this call claimed it. */
export async function claimTick(c: ScriptCaller, scope: string, id: string, t: TickClaim): Promise<boolean> {
  const reply = await c.call('schedule-claim', REPLY, scope, scheduleKeys(c, scope, id), { id, ...t });
  if (reply.refused) return unexpected('schedule-claim', reply.refused);
  return reply.code === Outcome.scheduleClaim.Claimed;
}
