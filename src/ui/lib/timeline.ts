import type { AttemptEventData, EndEventData, StatusEventData } from '../../lib/contract/index.ts';
import type { RunStreamEvent } from './run-stream.ts';

/** One line of the timeline: consecutive token events of one speaker are one line, with their count. */
export interface TimelineEntry {
  id: string;
  /** Id of the last event merged into this line (the same as `id` for one event). */
  lastId: string;
  type: string;
  summary: string;
  /** Who said it, `<agent> · <role>`, for events that carry both (text, notices, tool calls and results). */
  who?: string;
  /** A tool result that is an error (the tool did not run, or failed). */
  failed?: boolean;
  /** Token lines: how many events and characters they hold. */
  tokens?: { events: number; chars: number };
}

export interface Timeline {
  entries: TimelineEntry[];
  /** Entries dropped from the front to keep the page bounded. */
  dropped: number;
  /** The answer as streamed so far: the text of the current attempt only. */
  answer: string;
  attempt?: number;
  notices: { id: string; text: string }[];
  end?: { status: string; answer?: string; finishReason?: string; error?: { code: string; message: string } };
  /** The run's changes of state, in order, for the waterfall (kept whole: a run has few). */
  marks: PhaseMark[];
}

/**
 * An event that starts or ends a part of the run: an attempt's start, a status change, the end.
 * The waterfall is drawn from these (their times are Redis's, from the stream ids).
 */
export interface PhaseMark {
  id: string;
  /** When the event was written (epoch ms). */
  at: number;
  /**
   * When the last event of any kind before the next mark was written: for a worker that died,
   * its last sign of life (heartbeats write no events, so it may have lived a little longer).
   */
  until: number;
  event:
    | { type: 'attempt'; data: AttemptEventData }
    | { type: 'status'; data: StatusEventData }
    | { type: 'end'; data: EndEventData };
}

export const emptyTimeline = (): Timeline => ({ entries: [], dropped: 0, answer: '', notices: [], marks: [] });

/** A run with many status changes stays readable and cheap to render. */
const MAX_ENTRIES = 1000;

/** Folds a batch of events into the timeline (a new object; the old one is left as it was). */
export function applyEvents(t: Timeline, events: RunStreamEvent[]): Timeline {
  const next: Timeline = { ...t, entries: [...t.entries], notices: [...t.notices], marks: [...t.marks] };
  for (const e of events) {
    apply(next, e);
    mark(next, e);
  }
  if (next.entries.length > MAX_ENTRIES) {
    next.dropped += next.entries.length - MAX_ENTRIES;
    next.entries = next.entries.slice(-MAX_ENTRIES);
  }
  return next;
}

function apply(t: Timeline, e: RunStreamEvent): void {
  switch (e.type) {
    case 'token': {
      t.answer += e.data.text;
      const last = t.entries.at(-1);
      const who = speaker(e.data);
      // Text of another agent (a sub-agent the run selected) starts a line of its own.
      if (last?.type === 'token' && last.tokens && last.who === who) {
        const tokens = { events: last.tokens.events + 1, chars: last.tokens.chars + e.data.text.length };
        t.entries[t.entries.length - 1] = { ...last, lastId: e.id, tokens, summary: tokenSummary(tokens) };
      } else {
        const tokens = { events: 1, chars: e.data.text.length };
        t.entries.push({ id: e.id, lastId: e.id, type: 'token', tokens, summary: tokenSummary(tokens), who });
      }
      return;
    }
    case 'tool-call':
      push(t, e, `${e.data.name}(${short(json(e.data.args), 120)}) · call ${e.data.callId}`, e.type, speaker(e.data));
      return;
    case 'tool-result': {
      const d = e.data;
      const outcome = d.ok ? `→ ${short(json(d.result), 120)}` : `failed: ${short(d.error, 120)}`;
      push(t, e, `${d.name} ${outcome} · call ${d.callId}`, e.type, speaker(d));
      if (!d.ok) t.entries[t.entries.length - 1].failed = true;
      return;
    }
    case 'attempt':
      // A new attempt produces the answer again from its start (docs/streams.md: "drop the text you have").
      t.answer = '';
      t.attempt = e.data.attempt;
      push(t, e, `attempt ${e.data.attempt} of ${e.data.maxAttempts}${e.data.recovered ? ' (taken over after a lost lease)' : ''}`);
      return;
    case 'status':
      push(t, e, statusSummary(e.data as unknown as Record<string, unknown>));
      return;
    case 'data':
      push(t, e, `${e.data.name}${e.data.dataId ? ` #${e.data.dataId}` : ''}: ${short(json(e.data.data), 120)}`, e.type, speaker(e.data));
      return;
    case 'ephemeral':
      t.notices.push({ id: e.id, text: e.data.text });
      push(t, e, e.data.text, e.type, speaker(e.data));
      return;
    case 'steering': {
      const d = e.data;
      const what = d.outcome === 'delivered' ? `delivered at step ${d.step}` : d.outcome === 'not-delivered' ? `not delivered (run ${d.reason}): next turn ${d.turnRunId}` : 'pending';
      push(t, e, `steering message ${d.messageId} ${what}`, e.type);
      return;
    }
    case 'end': {
      const d = e.data;
      t.end = { status: d.status, answer: d.result?.answer, finishReason: d.result?.finishReason, error: d.error };
      const why = d.error ? `: ${d.error.code} ${d.error.message}` : d.result?.finishReason ? ` (${d.result.finishReason})` : '';
      push(t, e, `${d.status}${why}`);
      return;
    }
    default:
      push(t, e, `${e.name}: ${short(JSON.stringify(e.data))}`, e.name);
  }
}

/** Keeps the events the waterfall reads, and moves the last one's `until` on with every other. */
function mark(t: Timeline, e: RunStreamEvent): void {
  const at = eventTime(e.id).getTime();
  const event = phaseOf(e);
  if (event) {
    t.marks.push({ id: e.id, at, until: at, event });
    return;
  }
  const last = t.marks.at(-1);
  if (last && at > last.until) t.marks[t.marks.length - 1] = { ...last, until: at };
}

function phaseOf(e: RunStreamEvent): PhaseMark['event'] | undefined {
  switch (e.type) {
    case 'attempt':
      return { type: e.type, data: e.data };
    case 'status':
      return { type: e.type, data: e.data };
    case 'end':
      return { type: e.type, data: e.data };
    default:
      return undefined;
  }
}

function push(t: Timeline, e: RunStreamEvent, summary: string, type: string = e.type, who?: string): void {
  t.entries.push(who ? { id: e.id, lastId: e.id, type, summary, who } : { id: e.id, lastId: e.id, type, summary });
}

/** `<agent> · <role>`; undefined for events written before they said who said them. */
function speaker(d: { agent?: string; role?: string }): string | undefined {
  return d.agent && d.role ? `${d.agent} · ${d.role}` : undefined;
}

function json(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v) ?? 'undefined';
}

function tokenSummary(n: { events: number; chars: number }): string {
  return `${n.chars} character${n.chars === 1 ? '' : 's'} of answer${n.events > 1 ? ` in ${n.events} events` : ''}`;
}

function statusSummary(d: Record<string, unknown>): string {
  const parts = [String(d.status)];
  if (typeof d.attempt === 'number' && typeof d.maxAttempts === 'number') parts.push(`attempt ${d.attempt}/${d.maxAttempts}`);
  if (typeof d.retryAt === 'number') parts.push(`next attempt at ${new Date(d.retryAt).toLocaleTimeString(undefined, { hour12: false })}`);
  const err = d.lastError as { code?: string; message?: string } | undefined;
  if (err?.code) parts.push(`${err.code}: ${err.message ?? ''}`);
  const blocked = d.blocked as { stepKey?: string } | undefined;
  if (blocked?.stepKey) parts.push(`on step ${blocked.stepKey}`);
  const resolved = d.resolved as { stepKey?: string; mode?: string } | undefined;
  if (resolved?.stepKey) parts.push(`step ${resolved.stepKey} resolved (${resolved.mode})`);
  const waits = d.waits as { key?: string }[] | undefined;
  if (Array.isArray(waits) && waits.length) parts.push(`on ${waits.map((w) => w.key).join(', ')}`);
  // A park names its new waits only; how many pend in all, and which stopped pending.
  if (typeof d.pending === 'number' && d.pending > (Array.isArray(waits) ? waits.length : 0)) parts.push(`${d.pending} pending`);
  const dropped = d.dropped as string[] | undefined;
  if (Array.isArray(dropped) && dropped.length) parts.push(`no longer waiting on ${dropped.join(', ')}`);
  const wait = d.wait as { key?: string; outcome?: string } | undefined;
  if (wait?.key) parts.push(`${wait.key} ${wait.outcome ?? ''}`.trim());
  if (typeof d.runAt === 'number') parts.push(`due at ${new Date(d.runAt).toLocaleTimeString(undefined, { hour12: false })}`);
  return parts.join(' · ');
}

function short(s: string, max = 160): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** The time an event was written: its stream id starts with the Redis time in ms. */
export function eventTime(id: string): Date {
  return new Date(Number(id.split('-')[0]));
}
