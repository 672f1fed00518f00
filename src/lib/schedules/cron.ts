import { Cron } from 'croner';
import { BatonError } from '../errors.ts';

/**
 * Cron expressions, read by croner (a maintained parser: seconds fields, IANA time zones,
 * daylight-saving gaps). Baton only asks it for fire times; it never lets croner run a timer.
 */

/** How many fire times a schedule's view lists. */
export const NEXT_FIRE_TIMES = 5;

/** Ticks walked at most to find the latest missed one after a gap, before jumping to now. */
const MAX_WALK = 100_000;

export interface CompiledCron {
  /** The first fire time strictly after `ms` (epoch ms), or undefined when it never fires again. */
  after(ms: number): number | undefined;
}

export function compileCron(expression: string, timezone: string): CompiledCron {
  const cron = new Cron(expression, { timezone, paused: true });
  return {
    after(ms) {
      const next = cron.nextRun(new Date(ms));
      return next ? next.getTime() : undefined;
    },
  };
}

/**
 * The expression and time zone as a schedule may use them, or VALIDATION_FAILED saying which
 * is wrong: five fields (minute first), six (second first) or a nickname (`@hourly`); a time
 * zone croner knows; at least one fire time ahead; never more often than once a second.
 */
export function checkCron(expression: string, timezone: string, now: number): CompiledCron {
  const fields = expression.trim().split(/\s+/);
  const nickname = fields.length === 1 && fields[0]!.startsWith('@');
  if (!nickname && fields.length !== 5 && fields.length !== 6) {
    throw invalid('body.cron', 'five fields (minute first) or six (second first)');
  }
  try {
    Intl.DateTimeFormat('en-US', { timeZone: timezone });
  } catch {
    throw invalid('body.timezone', 'an IANA time zone, such as Europe/Paris or UTC');
  }
  let cron: CompiledCron;
  try {
    cron = compileCron(expression, timezone);
  } catch (err) {
    throw invalid('body.cron', (err as Error).message.slice(0, 200));
  }
  const first = cron.after(now);
  const second = first === undefined ? undefined : cron.after(first);
  if (first === undefined || second === undefined) throw invalid('body.cron', 'never fires (again)');
  // Seconds are croner's smallest field, so this holds by construction; kept as the rule's statement.
  if (second - first < 1000) throw invalid('body.cron', 'fires more often than once a second');
  return cron;
}

/** The next `n` fire times after `ms`. */
export function fireTimes(cron: CompiledCron, ms: number, n = NEXT_FIRE_TIMES): number[] {
  const out: number[] = [];
  for (let t = cron.after(ms); t !== undefined && out.length < n; t = cron.after(t)) out.push(t);
  return out;
}

/**
 * The ticks of a schedule whose next tick `due` has come (due ≤ now): the latest of those
 * missed (due more than `graceMs` before now; undefined when none was), and the first that was
 * not (≥ now - graceMs: due now, or in the future). A walk over a long gap of a fast schedule
 * is bounded; past the bound its last tick stands for the latest missed.
 */
export function splitDue(
  cron: CompiledCron, due: number, now: number, graceMs: number,
): { latestMissed: number | undefined; next: number | undefined } {
  const cutoff = now - graceMs;
  let latestMissed: number | undefined;
  let next: number | undefined = due;
  for (let walked = 0; next !== undefined && next < cutoff && walked < MAX_WALK; walked++) {
    latestMissed = next;
    next = cron.after(next);
  }
  if (next !== undefined && next < cutoff) next = cron.after(cutoff - 1);
  return { latestMissed, next };
}

function invalid(path: string, message: string): BatonError {
  return new BatonError('VALIDATION_FAILED', undefined, [{ path, message }]);
}
