import type { MissedTickPolicy } from './api.ts';
import { formatTime } from './format.ts';

/** A missed-tick policy in words, as the schedules page lists it and its form offers it. */
export const MISSED_ABOUT: Record<MissedTickPolicy, string> = {
  skip: 'skip: no run for ticks missed while no process was up',
  catchUpOne: 'catch up one: one run for the latest missed tick',
};

/** A tick as the schedule's own time zone reads it (the one its expression is read in): "Mon, Dec 7, 2026, 09:30". */
export function formatInZone(iso: string, timeZone: string): string {
  try {
    return new Date(iso).toLocaleString(undefined, {
      timeZone, weekday: 'short', year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hourCycle: 'h23',
    });
  } catch {
    // A zone this browser does not know (the API's croner does): the reader's own.
    return formatTime(iso);
  }
}
