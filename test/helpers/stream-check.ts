import { expect } from 'vitest';
import { compareIds } from '../../src/lib/streams/log.ts';
import type { Harness } from './harness.ts';

/** An event as a reader received it: id, type and the parsed data. */
export interface Seen { id: string; type: string; data: unknown }

/** The run's whole event log, read straight from Redis: the reference a reader must match. */
export async function fullLog(h: Harness, scope: string, runId: string): Promise<Seen[]> {
  const rows = await h.redis.xrange(h.keys.scope(scope).events(runId), '-', '+');
  return rows.map(([id, f]) => ({ id, type: f[f.indexOf('type') + 1], data: JSON.parse(f[f.indexOf('data') + 1]) }));
}

/** readSse's events in the shape of the log. */
export function seen(events: { id: string; event: string; data: unknown }[]): Seen[] {
  return events.map((e) => ({ id: e.id, type: e.event, data: e.data }));
}

/** Strictly increasing stream ids: no duplicate, nothing out of order. */
export function expectIncreasing(ids: string[]): void {
  for (let i = 1; i < ids.length; i++) {
    if (compareIds(ids[i - 1], ids[i]) >= 0) throw new Error(`ids not increasing at ${i}: ${ids[i - 1]} then ${ids[i]}`);
  }
}

/** The reader got exactly the log after `afterId` ('0' = all of it): no gap, no duplicate, same order. */
export function expectExactly(seen: Seen[], log: Seen[], afterId = '0'): void {
  const want = afterId === '0' ? log : log.filter((e) => compareIds(e.id, afterId) > 0);
  expectIncreasing(seen.map((e) => e.id));
  expect(seen.map((e) => e.id)).toEqual(want.map((e) => e.id));
  expect(seen).toEqual(want);
}

/** `count` words `w0 w1 ...`: the echo agent streams each word (with its space) as one token. */
export const words = (count: number, tag = 'w') => Array.from({ length: count }, (_, i) => `${tag}${i}`).join(' ');
