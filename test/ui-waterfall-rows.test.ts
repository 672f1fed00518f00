import { expect, it } from 'vitest';
import type { Run, Step } from '../src/ui/lib/api.ts';
import type { PhaseMark } from '../src/ui/lib/timeline.ts';
import { buildWaterfall } from '../src/ui/lib/waterfall.ts';

/**
 * The waterfall's rows for event sequences the browser test does not reach: a block resolved
 * by an operator, a cancel while parked, a run still going. The sequences are those the
 * engine's scripts write (transitions/claim.lua, block.lua, resolve.lua, wait.lua, finish.lua).
 */
const T0 = Date.UTC(2026, 0, 1);
const iso = (ms: number) => new Date(T0 + ms).toISOString();

function marks(...events: [number, PhaseMark['event']][]): PhaseMark[] {
  return events.map(([ms, event], i) => ({ id: `${T0 + ms}-${i}`, at: T0 + ms, until: T0 + ms, event }));
}

function run(o: Partial<Run> = {}): Run {
  return {
    id: 'r1', scope: 'acme', sessionId: 's1', runtime: 'default', agent: 'a', status: 'succeeded', attempt: 1, maxAttempts: 3,
    recoveries: 0, createdAt: iso(0), updatedAt: iso(0), input: { content: 'x' }, links: { self: '', events: '' }, ...o,
  } as Run;
}

const step = (key: string, from?: number, to?: number, status: Step['status'] = 'done'): Step => {
  const [kind, name, n] = key.split(':');
  return { key, kind: kind as Step['kind'], name, n: Number(n), status, startedAt: from === undefined ? undefined : iso(from),
    finishedAt: to === undefined ? undefined : iso(to) };
};

const shape = (rows: ReturnType<typeof buildWaterfall>['rows']) => rows.map((r) => `${r.kind}:${r.label}:${r.summary}`);

it('a step blocked after a takeover, resolved by an operator: the block spans the wait for the operator, the resumed bar reads the memo', () => {
  const w = buildWaterfall(
    run({ finishedAt: iso(900) }),
    [step('step:one:1', 20, 30), step('tool:charge:1', 40, undefined, 'started'), step('step:after:1', 810, 820)],
    marks(
      [0, { type: 'status', data: { status: 'queued', attempt: 0 } }],
      [10, { type: 'attempt', data: { attempt: 1, maxAttempts: 3 } }],
      [10, { type: 'status', data: { status: 'running', attempt: 1, maxAttempts: 3 } }],
      [300, { type: 'attempt', data: { attempt: 1, maxAttempts: 3, recovered: true } }],
      [300, { type: 'status', data: { status: 'recovered', attempt: 1, maxAttempts: 3, recoveries: 1 } }],
      [305, { type: 'status', data: { status: 'blocked', blocked: { stepKey: 'tool:charge:1', reason: 'unknown outcome', since: T0 + 305 } } }],
      [700, { type: 'status', data: { status: 'queued', resolved: { stepKey: 'tool:charge:1', mode: 'value' } } }],
      [800, { type: 'attempt', data: { attempt: 1, maxAttempts: 3, resumed: true } }],
      [800, { type: 'status', data: { status: 'running', attempt: 1, maxAttempts: 3, resumed: true } }],
      [900, { type: 'end', data: { status: 'succeeded', result: { answer: 'ok', finishReason: 'stop', toolCallsSeen: 0 } } }],
    ),
    T0 + 5000,
  );
  expect(shape(w.rows)).toEqual([
    'queued:Queued:',
    'attempt:Attempt 1:worker lost',
    'step:step one:done',
    'tool:tool charge:no result',
    'lapse:No worker:taken over',
    'attempt:Attempt 1 · taken over:blocked',
    'memo:step one:memo hit',
    'block:Blocked on tool:charge:1:resolved',
    'attempt:Attempt 1 · after the block:succeeded',
    'memo:step one:memo hit',
    'step:step after:done',
  ]);
  // The lost worker's last sign of life is the start of the step it died in, after its last event.
  expect(w.rows[1]).toMatchObject({ start: T0 + 10, end: T0 + 40 });
  expect(w.rows[4]).toMatchObject({ start: T0 + 40, end: T0 + 300 });
  expect(w.rows[7]).toMatchObject({ start: T0 + 305, end: T0 + 700 });
  expect(w).toMatchObject({ from: T0, to: T0 + 900 });
});

it('a run cancelled while parked ends its park at the cancel; a run still going is drawn up to now', () => {
  const cancelled = buildWaterfall(
    run({ status: 'cancelled', finishedAt: iso(500) }),
    [],
    marks(
      [10, { type: 'attempt', data: { attempt: 1, maxAttempts: 3 } }],
      [50, { type: 'status', data: { status: 'waiting', waits: [{ key: 'wait:ok:1', kind: 'input', name: 'ok', since: T0 + 50 }], pending: 1 } }],
      [500, { type: 'end', data: { status: 'cancelled', result: { answer: '', finishReason: 'cancelled', toolCallsSeen: 0 } } }],
    ),
    T0 + 5000,
  );
  expect(shape(cancelled.rows)).toEqual(['queued:Queued:', 'attempt:Attempt 1:parked', 'parked:Parked:cancelled']);
  expect(cancelled.rows[2]).toMatchObject({ start: T0 + 50, end: T0 + 500 });

  const going = buildWaterfall(
    run({ status: 'waiting', waits: [{ key: 'wait:ok:1', kind: 'input', name: 'ok', since: iso(50) }] }),
    [],
    marks(
      [10, { type: 'attempt', data: { attempt: 1, maxAttempts: 3 } }],
      [50, { type: 'status', data: { status: 'waiting', waits: [{ key: 'wait:ok:1', kind: 'input', name: 'ok', since: T0 + 50 }], pending: 1 } }],
    ),
    T0 + 2000,
  );
  expect(shape(going.rows)).toEqual(['queued:Queued:', 'attempt:Attempt 1:parked', 'wait:Wait ok:pending']);
  expect(going.rows[2].start).toBe(T0 + 50);
  expect(going.rows[2].end).toBeUndefined();
  expect(going).toMatchObject({ from: T0, to: T0 + 2000 });
});
