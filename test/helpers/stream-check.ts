import { expect } from 'vitest';
import { compareIds } from '../../src/lib/streams/log.ts';
import { BatonApiError, type BatonClient, type Run, type RunStreamEvent } from '../../src/lib/client/client.ts';
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

/** The tokens after the last `attempt` event: a new holder streams its answer again from the start. */
export function answerText(events: Seen[]): string {
  let text = '';
  for (const e of events) {
    if (e.type === 'attempt') text = '';
    if (e.type === 'token') text += (e.data as { text: string }).text;
  }
  return text;
}

/**
 * What a reader got is the run's whole log (no gap, no duplicate), one `end`, last, with the
 * run succeeded, and the answer's tokens spell `content`. `label` names the run in failures.
 */
export async function expectWholeStream(
  h: Harness, scope: string, run: { runId: string; content: string }, got: Seen[], label = run.runId,
): Promise<void> {
  const log = await fullLog(h, scope, run.runId);
  expectExactly(got, log);
  expect(got.filter((e) => e.type === 'end').length, label).toBe(1);
  expect(got.at(-1), label).toMatchObject({ type: 'end', data: { status: 'succeeded' } });
  expect(answerText(got), label).toBe(run.content);
}

/** A run's stream read to its end through the typed client, each event noted with when it came. */
export interface RunReader { runId: string; content: string; events: (RunStreamEvent & { at: number })[]; done: Promise<void> }

/**
 * Reads a run's stream to its end with the client's own resumption (Last-Event-ID), as a
 * failover test's readers do: a run lost with a failed primary (RUN_NOT_FOUND) ends it without
 * an error, for the test to count.
 */
export function readToEnd(client: BatonClient, runId: string, content: string): RunReader {
  const reader: RunReader = { runId, content, events: [], done: Promise.resolve() };
  reader.done = (async () => {
    try {
      for await (const e of client.stream(runId)) reader.events.push({ ...e, at: Date.now() });
    } catch (err) {
      if (!(err instanceof BatonApiError && err.code === 'RUN_NOT_FOUND')) throw err;
    }
  })();
  return reader;
}

/** A run as Redis holds it now, or undefined if it is gone (lost with a failed primary's unreplicated writes). */
export async function runIfKept(client: BatonClient, runId: string): Promise<Run | undefined> {
  return client.get(runId).catch((err: unknown) => {
    if (err instanceof BatonApiError && err.status === 404) return undefined;
    throw err;
  });
}

/** Whether a stream event id (`<ms>-<seq>`, on Redis's clock: this machine's) was written after `at`. */
export function writtenAfter(id: string, at: number): boolean {
  return Number(id.split('-')[0]) > at;
}
