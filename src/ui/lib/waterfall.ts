import type { AttemptEventData, RunError } from '../../lib/contract/index.ts';
import type { Run, Step } from './api.ts';
import { formatClock } from './format.ts';
import type { PhaseMark } from './timeline.ts';

/**
 * A run drawn on one time axis from what Baton stores: its event log (attempts, status
 * changes, the end; times from the stream ids) and its memoized steps (times from the worker
 * that stored them). No trace collector is involved.
 *
 * An "attempt bar" is one stretch of a worker holding the run, from its `attempt` event to
 * what ended it: a retry, a park on waits, a block, the end, or the next holder taking it over
 * (a worker that died or handed the run over at shutdown). A retry counts a new attempt; a
 * takeover and a resume after a wait or a block go on with the same attempt number, so one
 * attempt number can have several bars.
 */

export type RowKind = 'queued' | 'attempt' | 'backoff' | 'lapse' | 'block' | 'parked' | 'wait' | 'step' | 'infer' | 'tool' | 'memo';
export type Tone = 'ok' | 'bad' | 'warn' | 'wait' | 'lost' | 'running' | 'muted' | 'memo' | 'step' | 'infer' | 'tool';

export interface WaterfallRow {
  /** Stable across refreshes (a list key). */
  key: string;
  kind: RowKind;
  /** What the row is: "Attempt 2 · taken over", "tool lookup". */
  label: string;
  /** How it ended, in a word or two: "retrying", "worker lost", "memo hit" (or nothing to add). */
  summary: string;
  /** How it ended, in a sentence. */
  outcome: string;
  /** Epoch ms; absent when nothing stored says when (a step result an operator supplied). */
  start?: number;
  /** Absent: not over yet (drawn up to now). */
  end?: number;
  tone: Tone;
  /** A step of the attempt bar above it. */
  child: boolean;
  /** The attempt bar (1-based, in order) the row is or belongs to. */
  bar?: number;
}

export interface Waterfall {
  rows: WaterfallRow[];
  /** The axis: from the submit to the end (or now). */
  from: number;
  to: number;
}

/** More memo hits than this in one attempt bar are one row (a long agent replays hundreds). */
const MEMO_ROWS = 12;

type Ending =
  | { kind: 'retrying'; retryAt?: number; error?: RunError }
  | { kind: 'waiting'; waits: string[] }
  | { kind: 'blocked'; stepKey: string; reason: string }
  | { kind: 'lost'; takenOverAt: number }
  | { kind: 'end'; status: string; error?: RunError };

/** One stretch of a worker holding the run. */
interface Hold {
  bar: number;
  attempt: number;
  how: 'first' | 'retry' | 'recovered' | 'after-wait' | 'after-block';
  start: number;
  /** The last event written while it held the run. */
  lastSeen: number;
  end?: number;
  ending?: Ending;
}

/** A stretch of time no worker held the run: queued, backing off, taken over, blocked, parked (when it ended so). */
interface Gap {
  kind: 'queued' | 'backoff' | 'lapse' | 'block' | 'parked';
  label: string;
  start: number;
  end?: number;
  outcome: string;
  summary: string;
  /** A lapse: the hold whose worker was lost (the lapse starts at its last sign of life). */
  lost?: Hold;
  /** A backoff: when the next attempt is due. */
  due?: number;
}

const GAP_TONES: Record<Gap['kind'], Tone> = { queued: 'muted', backoff: 'warn', lapse: 'lost', block: 'warn', parked: 'wait' };

const ms = (iso: string | undefined) => (iso === undefined ? undefined : new Date(iso).getTime());
const clock = (t: number) => formatClock(new Date(t));
const errorText = (e: RunError | undefined) => (e ? `${e.code} ${e.message}` : '');

/** Reads the marks in order: the holds and the gaps between them, and how each wait ended. */
function readMarks(marks: PhaseMark[], createdAt: number) {
  const holds: Hold[] = [];
  const gaps: Gap[] = [];
  const waitOutcomes = new Map<string, string>();
  let hold: Hold | undefined;
  let gap: Gap | undefined = { kind: 'queued', label: 'Queued', summary: 'not started', start: createdAt, outcome: 'waits for its turn and a worker' };
  let parkedOn: 'wait' | 'block' | undefined;

  const closeGap = (at: number, summary: string, outcome: string) => {
    if (!gap) return;
    gaps.push({ ...gap, end: at, summary, outcome });
    gap = undefined;
  };
  const closeHold = (at: number, ending: Ending) => {
    if (!hold) return;
    hold.end = at;
    hold.ending = ending;
    hold = undefined;
  };

  for (const m of marks) {
    const e = m.event;
    if (e.type === 'attempt') {
      if (hold) {
        // Another worker took the run over: the one holding it stopped writing at lastSeen.
        const lost = hold;
        closeHold(lost.lastSeen, { kind: 'lost', takenOverAt: m.at });
        gaps.push({
          kind: 'lapse', label: 'No worker', summary: 'taken over', start: lost.lastSeen, end: m.at, lost,
          outcome: 'from the last sign of the lost worker to the takeover (its lease ran out, or it handed the run over at shutdown)',
        });
      }
      if (gap?.kind === 'parked') gap = undefined;
      if (gap?.kind === 'queued') closeGap(m.at, '', 'waited for its turn and a worker');
      if (gap?.kind === 'backoff') closeGap(m.at, 'retried', `waited for the next attempt${gap.due ? `, due at ${clock(gap.due)}` : ''}`);
      if (gap) closeGap(m.at, gap.summary, gap.outcome);
      hold = { bar: holds.length + 1, attempt: e.data.attempt, how: holdHow(e.data, parkedOn), start: m.at, lastSeen: m.until };
      holds.push(hold);
      parkedOn = undefined;
      continue;
    }
    if (hold) hold.lastSeen = Math.max(hold.lastSeen, m.until);
    if (e.type === 'end') {
      closeHold(m.at, { kind: 'end', status: e.data.status, error: e.data.error });
      closeGap(m.at, e.data.status, `ended ${e.data.status} before another attempt started`);
      continue;
    }
    const d = e.data;
    switch (d.status) {
      case 'retrying':
        closeHold(m.at, { kind: 'retrying', retryAt: d.retryAt, error: d.lastError });
        gap = {
          kind: 'backoff', label: 'Backoff', summary: 'retry due', start: m.at, due: d.retryAt,
          outcome: `waits for the next attempt${d.retryAt ? `, due at ${clock(d.retryAt)}` : ''}`,
        };
        break;
      case 'waiting':
        closeHold(m.at, { kind: 'waiting', waits: (d.waits ?? []).map((w) => w.key) });
        // Its waits' own rows cover the park; this one is kept only if the run ends parked (a cancel).
        gap = { kind: 'parked', label: 'Parked', summary: 'parked', start: m.at, outcome: 'waits for its waits' };
        parkedOn = 'wait';
        break;
      case 'blocked':
        closeHold(m.at, { kind: 'blocked', stepKey: d.blocked?.stepKey ?? '?', reason: d.blocked?.reason ?? '' });
        gap = {
          kind: 'block', label: `Blocked on ${d.blocked?.stepKey ?? 'a step'}`, summary: 'blocked', start: m.at,
          outcome: 'waits for an operator to resolve the step',
        };
        parkedOn = 'block';
        break;
      case 'queued':
        if (d.resolved && gap?.kind === 'block') {
          closeGap(m.at, 'resolved', `resolved by an operator ${d.resolved.mode === 'value' ? 'with a value' : 'to run again'}`);
        }
        if (d.wait) waitOutcomes.set(d.wait.key, d.wait.outcome);
        if (gap?.kind === 'parked') gap = undefined;
        break;
    }
  }
  // Still open: the hold that runs now, or the gap the run is in (a park: its pending waits are drawn).
  if (gap && gap.kind !== 'parked') gaps.push(gap);
  return { holds, gaps, waitOutcomes };
}

function holdHow(a: AttemptEventData, parkedOn: 'wait' | 'block' | undefined): Hold['how'] {
  if (a.recovered) return 'recovered';
  if (a.resumed) return parkedOn === 'block' ? 'after-block' : 'after-wait';
  return a.attempt > 1 ? 'retry' : 'first';
}

function holdRow(h: Hold): WaterfallRow {
  const how = { first: '', retry: '', recovered: ' · taken over', 'after-wait': ' · after the wait', 'after-block': ' · after the block' }[h.how];
  const [summary, outcome, tone] = ending(h);
  return {
    key: `bar-${h.bar}`, kind: 'attempt', label: `Attempt ${h.attempt}${how}`, summary, outcome, tone,
    start: h.start, end: h.end, child: false, bar: h.bar,
  };
}

function ending(h: Hold): [string, string, Tone] {
  const e = h.ending;
  if (!e) return ['running', 'running now', 'running'];
  switch (e.kind) {
    case 'retrying':
      return ['retrying', `failed and will retry: ${errorText(e.error) || 'a transient error'}`, 'warn'];
    case 'waiting':
      return ['parked', `parked on ${e.waits.length ? e.waits.join(', ') : 'its pending waits'}; no worker held it meanwhile`, 'wait'];
    case 'blocked':
      return ['blocked', `blocked on step ${e.stepKey}: ${e.reason}`, 'warn'];
    case 'lost':
      return ['worker lost', `its worker stopped after its last event at ${clock(h.lastSeen)}; another took the run over at ${clock(e.takenOverAt)}`, 'lost'];
    case 'end': {
      const tone: Tone = e.status === 'succeeded' ? 'ok' : e.status === 'failed' ? 'bad' : 'muted';
      return [e.status, e.error ? `${e.status}: ${errorText(e.error)}` : e.status, tone];
    }
  }
}

const stepName = (s: Step) => `${s.kind} ${s.name}${s.n > 1 ? ` #${s.n}` : ''}`;
/** When a step began (a result an operator supplied has no times). */
const stepAt = (s: Step) => ms(s.startedAt) ?? ms(s.finishedAt);

/** The bar a step ran in: the last to start at or before it (a worker's clock against Redis's). */
function holdAt(holds: Hold[], t: number): Hold | undefined {
  let found: Hold | undefined;
  for (const h of holds) if (h.start <= t) found = h;
  return found;
}

function stepRow(s: Step, bar: number | undefined): WaterfallRow {
  const kind = s.kind === 'wait' ? 'wait' : s.kind;
  const done = s.status === 'done';
  return {
    key: `step-${s.key}`, kind, label: stepName(s), child: bar !== undefined, bar,
    start: stepAt(s), end: ms(s.finishedAt) ?? (done ? stepAt(s) : undefined),
    summary: done ? 'done' : 'no result',
    outcome: stepOutcome(s),
    tone: done ? kind : 'warn',
  };
}

function stepOutcome(s: Step): string {
  if (s.status !== 'done') return 'started and stored no result: its outcome is unknown';
  if (!s.finishedAt) return 'its result has no times: an operator supplied it';
  return `ran and stored its result${s.streamed ? ' (and the text it streamed)' : ''}`;
}

function waitRow(s: Step, outcome: string | undefined): WaterfallRow {
  const how = outcome === 'timed-out' || s.timedOut ? 'timed out' : outcome === 'slept' ? 'slept' : 'resumed';
  return {
    key: `step-${s.key}`, kind: 'wait', label: `Wait ${s.name}${s.n > 1 ? ` #${s.n}` : ''}`, summary: how,
    outcome: `${s.key}: from the park to its ${how === 'resumed' ? 'resume' : how === 'slept' ? 'end' : 'timeout'}`,
    start: ms(s.startedAt), end: ms(s.finishedAt), tone: 'wait', child: false,
  };
}

/** The steps an attempt bar read from the memo: every result stored before it began (it replays the agent from its start). */
function memoRows(h: Hold, stored: { step: Step; at: number; bar?: number }[]): WaterfallRow[] {
  const hits = stored.filter((s) => s.at <= h.start);
  const from = (s: { bar?: number; at: number }) => (s.bar ? `stored by attempt bar ${s.bar} at ${clock(s.at)}` : `stored at ${clock(s.at)}`);
  const row = (key: string, label: string, outcome: string): WaterfallRow => ({
    key: `memo-${h.bar}-${key}`, kind: 'memo', label, summary: 'memo hit', outcome, start: h.start, end: h.start,
    tone: 'memo', child: true, bar: h.bar,
  });
  if (hits.length <= MEMO_ROWS) {
    return hits.map((s) => row(s.step.key, stepName(s.step), `answered from the memo, not run again: ${from(s)}`));
  }
  const names = hits.slice(0, 5).map((s) => s.step.key).join(', ');
  return [row('all', `${hits.length} steps`, `answered from the memo, not run again: ${names} and ${hits.length - 5} more`)];
}

/**
 * The rows of a run's waterfall, in time order, each attempt bar followed by its memo hits and
 * the steps it ran. `now` closes what is still going.
 */
export function buildWaterfall(run: Run, steps: Step[], marks: PhaseMark[], now: number): Waterfall {
  const createdAt = new Date(run.createdAt).getTime();
  const { holds, gaps, waitOutcomes } = readMarks(marks, createdAt);

  const children = new Map<number, WaterfallRow[]>();
  const top: WaterfallRow[] = [];
  const stored: { step: Step; at: number; bar?: number }[] = [];
  for (const s of steps) {
    const at = stepAt(s);
    if (s.kind === 'wait') {
      top.push(waitRow(s, waitOutcomes.get(s.key)));
      if (s.status === 'done' && s.finishedAt) stored.push({ step: s, at: ms(s.finishedAt)! });
      continue;
    }
    const h = at === undefined ? undefined : holdAt(holds, at);
    const row = stepRow(s, h?.bar);
    if (h) {
      children.set(h.bar, [...(children.get(h.bar) ?? []), row]);
      h.lastSeen = Math.max(h.lastSeen, row.end ?? row.start ?? h.lastSeen);
    } else {
      top.push(row);
    }
    const doneAt = ms(s.finishedAt);
    if (s.status === 'done' && doneAt !== undefined) stored.push({ step: s, at: doneAt, bar: h?.bar });
  }
  // A lost worker's last sign of life may be a step it stored after its last event.
  for (const h of holds) if (h.ending?.kind === 'lost') h.end = h.lastSeen;
  for (const w of run.waits ?? []) {
    if (top.some((r) => r.key === `step-${w.key}`)) continue;
    top.push({
      key: `step-${w.key}`, kind: 'wait', label: `Wait ${w.name}`, summary: 'pending', tone: 'wait', child: false,
      start: ms(w.since), outcome: `${w.key} (${w.kind}) pending${w.expiresAt ? `; times out at ${clock(ms(w.expiresAt)!)}` : ''}`,
    });
  }
  for (const g of gaps) {
    const start = g.lost ? g.lost.lastSeen : g.start;
    top.push({ key: `${g.kind}-${g.start}`, kind: g.kind, label: g.label, summary: g.summary,
      outcome: g.outcome, start, end: g.end, tone: GAP_TONES[g.kind], child: false });
  }
  for (const h of holds) top.push(holdRow(h));

  // Time order; rows with no time last. Equal starts keep the order above (gaps before holds).
  const order = top.map((r, i) => ({ r, i })).sort((a, b) => (a.r.start ?? Infinity) - (b.r.start ?? Infinity) || a.i - b.i);
  const rows: WaterfallRow[] = [];
  for (const { r } of order) {
    rows.push(r);
    if (r.kind !== 'attempt' || r.bar === undefined) continue;
    const h = holds[r.bar - 1];
    rows.push(...memoRows(h, stored), ...(children.get(r.bar) ?? []));
  }

  const ended = ms(run.finishedAt);
  const times = rows.flatMap((r) => [r.start, r.end]).filter((t): t is number => t !== undefined);
  const from = Math.min(createdAt, ...times);
  const to = Math.max(ended ?? now, ...times, from + 1);
  return { rows, from, to };
}
