import type { Redis } from 'ioredis';
import { createKeys } from '../src/lib/keys.ts';
import { TERMINAL_STATUSES } from '../src/lib/contract/runs.ts';
import { parseRunRecord, type RunRecord, type SessionMessage } from '../src/lib/transitions/record.ts';
import { expectedAnswer, soakKeys } from './soak-agent.ts';
import type { StreamEvent } from './soak-client.ts';

/** A run the API accepted (202, or 200 for a retried submit with the same idempotency key). */
export interface AcceptedRun {
  id: string;
  scope: string;
  sessionId: string;
  /** Position in its session's submission order, from 0. */
  index: number;
  input: string;
  idempotencyKey: string;
}

export interface SessionLog { scope: string; sessionId: string; runs: AcceptedRun[] }

/** Everything one streaming client received for one run, across all its reconnects. */
export interface StreamLog {
  runId: string;
  scope: string;
  events: StreamEvent[];
  connections: number;
  drops: number;
  ended: boolean;
}

/** What the driver's resumes of one wait got back: HTTP statuses in order. */
export interface WaitResumes { runId: string; waitKey: string; statuses: number[]; byToken: number }

export interface CheckInput {
  redis: Redis;
  prefix: string;
  sessions: SessionLog[];
  streams: StreamLog[];
  /** Every wait the driver resumed, by `<runId> <waitKey>`. */
  resumes: Map<string, WaitResumes>;
  /** A session's committed history as the API serves it. */
  messages(scope: string, sessionId: string): Promise<SessionMessage[]>;
}

export interface CheckStats {
  runs: number;
  succeeded: number;
  recoveries: number;
  retriedRuns: number;
  /** Runs that were blocked on the non-idempotent step and resolved by the operator. */
  resolvedRuns: number;
  /** Waits the driver resumed (a 200), and how many of those through the resume token. */
  waitsResumed: number;
  tokenResumes: number;
  providerRequests: number;
  providerApplied: number;
  toolExecutions: number;
  streamsChecked: number;
  streamConnections: number;
  historyMessages: number;
}

const STEPS = ['step:plan:1', 'tool:publish:1', 'infer:draft:1'] as const;
const TOOL = 'tool:notify:1';
/** The waits every run reaches, and the value each must have been resumed with. */
const WAITS = [
  { key: 'wait:confirm:1', value: (runId: string) => ({ confirm: runId }) },
  { key: 'wait:publish:1', value: () => ({ approved: true }) },
] as const;

/**
 * The soak's verdict, computed from Redis (what really happened) and the API (what a user
 * sees) once every accepted run is expected to be terminal. Each violation is one line
 * naming the run or session and what was wrong.
 */
export async function checkSoak(input: CheckInput): Promise<{ violations: string[]; stats: CheckStats }> {
  const v: string[] = [];
  const keys = createKeys(input.prefix);
  const sk = soakKeys(input.prefix);
  const accepted = input.sessions.flatMap((s) => s.runs);
  const stats: CheckStats = {
    runs: accepted.length, succeeded: 0, recoveries: 0, retriedRuns: 0, resolvedRuns: 0, waitsResumed: 0, tokenResumes: 0,
    providerRequests: 0, providerApplied: 0,
    toolExecutions: 0, streamsChecked: 0, streamConnections: 0, historyMessages: 0,
  };

  // Accepted exactly once: no run lost, none created twice by a retried submit.
  const ids = new Set<string>();
  for (const r of accepted) {
    if (ids.has(r.id)) v.push(`run ${r.id}: accepted for two different submits (${r.idempotencyKey})`);
    ids.add(r.id);
  }
  for (const s of input.sessions) {
    const stored = await input.redis.zrange(keys.scope(s.scope).sessionRuns(s.sessionId), 0, -1);
    const mine = new Set(s.runs.map((r) => r.id));
    for (const id of stored) if (!mine.has(id)) v.push(`session ${s.scope}/${s.sessionId}: holds run ${id} that no submit was answered with (duplicate submit?)`);
    for (const id of mine) if (!stored.includes(id)) v.push(`session ${s.scope}/${s.sessionId}: accepted run ${id} is missing from Redis`);
  }

  const [applied, requests, executions, memoReruns] = await Promise.all([
    input.redis.hgetall(sk.applied), input.redis.hgetall(sk.requests),
    input.redis.hgetall(sk.executions), input.redis.hgetall(sk.memoReruns),
  ]);
  for (const n of Object.values(requests)) stats.providerRequests += Number(n);
  for (const n of Object.values(applied)) stats.providerApplied += Number(n);
  for (const n of Object.values(executions)) stats.toolExecutions += Number(n);
  for (const [key, n] of Object.entries(memoReruns)) v.push(`step ${key}: ran ${n} more time(s) after its result was stored`);

  // Exactly once from the driver's side too: a wait answered 200 more than once was delivered twice.
  for (const r of input.resumes.values()) {
    const ok = r.statuses.filter((st) => st === 200).length;
    stats.waitsResumed += ok;
    stats.tokenResumes += r.byToken;
    if (ok > 1) v.push(`run ${r.runId}: ${r.waitKey} resumed ${ok} times (${r.statuses.join(', ')})`);
    // 409: answered already (a reply lost to a kill, then asked again). Anything else is a refusal the driver did not earn.
    const odd = r.statuses.filter((st) => st !== 200 && st !== 409);
    if (odd.length) v.push(`run ${r.runId}: resuming ${r.waitKey} answered ${odd.join(', ')}`);
  }

  const records = new Map<string, RunRecord>();
  const logs = new Map<string, StreamEvent[]>();
  for (const r of accepted) {
    const rk = keys.scope(r.scope);
    const [raw, rows, steps] = await Promise.all([
      input.redis.hgetall(rk.run(r.id)),
      input.redis.xrange(rk.events(r.id), '-', '+'),
      input.redis.hgetall(rk.steps(r.id)),
    ]);
    const run = parseRunRecord(raw);
    if (!run) {
      v.push(`run ${r.id}: record missing`);
      continue;
    }
    records.set(r.id, run);
    const log = rows.map(([id, f]) => toEvent(id, f));
    logs.set(r.id, log);
    stats.recoveries += run.recoveries;
    if (run.attempt > 1) stats.retriedRuns++;
    // The resolve transition logs what it resolved; the log, not the driver's bookkeeping, is
    // the truth (a resolve whose reply was lost still happened).
    const resolvedStep = log.find((e) => e.type === 'status' && e.data.resolved)?.data.resolved.stepKey as string | undefined;
    if (resolvedStep) stats.resolvedRuns++;

    // Terminal exactly once: a terminal status and one `end` event, the last one.
    if (!(TERMINAL_STATUSES as readonly string[]).includes(run.status)) v.push(`run ${r.id}: not terminal (${run.status}${run.blocked ? `, blocked on ${run.blocked.stepKey}` : ''})`);
    const ends = log.filter((e) => e.type === 'end');
    if (ends.length !== 1) v.push(`run ${r.id}: ${ends.length} end events`);
    else if (log.at(-1)?.type !== 'end') v.push(`run ${r.id}: events after its end event`);
    else if (ends[0].data.status !== run.status) v.push(`run ${r.id}: end event says ${ends[0].data.status}, record says ${run.status}`);
    // The agent fails only transiently and has 20 attempts: any other ending is the engine's doing.
    if (run.status !== 'succeeded') {
      v.push(`run ${r.id}: ${run.status} after ${run.attempt} attempt(s): ${JSON.stringify(run.lastError ?? run.result)}`);
      continue;
    }
    stats.succeeded++;

    // The log itself: the answer's tokens after the last attempt marker, once each.
    const logText = answerText(log);
    if (logText !== run.result?.answer) v.push(`run ${r.id}: event log spells ${JSON.stringify(logText)}, answer is ${JSON.stringify(run.result?.answer)}`);

    // Side effects: each idempotent step applied exactly once, the tool executed at most once.
    for (const step of STEPS) {
      const key = `${r.id}:${step}`;
      if (Number(applied[key] ?? 0) !== 1) v.push(`run ${r.id}: step ${step} applied ${applied[key] ?? 0} times`);
      if (steps[step] === undefined) v.push(`run ${r.id}: step ${step} has no stored result`);
    }
    // Each wait's outcome is the value the driver sent, delivered once (its step result).
    for (const w of WAITS) {
      const stored = steps[w.key] === undefined ? undefined : (JSON.parse(steps[w.key]) as { v: unknown }).v;
      if (JSON.stringify(stored) !== JSON.stringify(w.value(r.id))) v.push(`run ${r.id}: ${w.key} holds ${JSON.stringify(stored)}`);
    }
    const execs = Number(executions[`${r.id}:${TOOL}`] ?? 0);
    if (execs > 1) v.push(`run ${r.id}: non-idempotent ${TOOL} executed ${execs} times`);
    if (execs === 0 && resolvedStep !== TOOL) v.push(`run ${r.id}: non-idempotent ${TOOL} never executed and never resolved`);
  }

  // Histories: user/assistant pairs in submission order, each succeeded run's turn once.
  for (const s of input.sessions) {
    const msgs = await input.messages(s.scope, s.sessionId);
    stats.historyMessages += msgs.length;
    const where = `session ${s.scope}/${s.sessionId}`;
    const byId = new Map(s.runs.map((r) => [r.id, r]));
    const committed = new Set<string>();
    let lastIndex = -1;
    if (msgs.length % 2 !== 0) v.push(`${where}: ${msgs.length} messages, a user message dangles`);
    for (let i = 0; i + 1 < msgs.length; i += 2) {
      const [u, a] = [msgs[i], msgs[i + 1]];
      const turn = i / 2;
      if (u.role !== 'user' || a.role !== 'assistant') { v.push(`${where}: turn ${turn} is ${u.role}/${a.role}`); continue; }
      if (u.runId !== a.runId) { v.push(`${where}: turn ${turn} pairs runs ${u.runId} and ${a.runId}`); continue; }
      const run = byId.get(u.runId);
      if (!run) { v.push(`${where}: turn ${turn} belongs to run ${u.runId}, not submitted to this session`); continue; }
      if (committed.has(run.id)) v.push(`${where}: run ${run.id} committed twice`);
      committed.add(run.id);
      if (run.index <= lastIndex) v.push(`${where}: run ${run.id} (submitted #${run.index}) committed after #${lastIndex}`);
      lastIndex = Math.max(lastIndex, run.index);
      if (u.content !== run.input) v.push(`${where}: run ${run.id} user message differs from its input`);
      const record = records.get(run.id);
      if (record?.status === 'succeeded') {
        if (a.incomplete) v.push(`${where}: run ${run.id} succeeded but its answer is marked incomplete`);
        if (a.content !== record.result?.answer) v.push(`${where}: run ${run.id} history answer differs from its result`);
        // The agent writes the number of turns it saw: proof it ran after every earlier turn, alone.
        if (a.content !== expectedAnswer(run.input, turn)) v.push(`${where}: run ${run.id} answered ${JSON.stringify(a.content)} at turn ${turn}`);
      }
    }
    for (const r of s.runs) {
      if (records.get(r.id)?.status === 'succeeded' && !committed.has(r.id)) v.push(`${where}: succeeded run ${r.id} is not in the history`);
    }
  }

  // Streaming clients: every event of the log exactly once, in order, and the whole answer.
  for (const st of input.streams) {
    stats.streamsChecked++;
    stats.streamConnections += st.connections;
    const log = logs.get(st.runId);
    const record = records.get(st.runId);
    if (!log || !record) continue;
    const where = `stream of run ${st.runId} (${st.connections} connections, ${st.drops} drops)`;
    if (!st.ended) { v.push(`${where}: never received the end event`); continue; }
    const got = st.events.map((e) => e.id);
    const want = log.map((e) => e.id);
    if (got.join() !== want.join()) {
      const dupes = got.length - new Set(got).size;
      v.push(`${where}: received ${got.length} events (${dupes} duplicates), the log has ${want.length}; first difference at #${firstDiff(got, want)}`);
      continue;
    }
    const text = answerText(st.events);
    if (text !== record.result?.answer) v.push(`${where}: saw ${JSON.stringify(text)}, answer is ${JSON.stringify(record.result?.answer)}`);
  }
  return { violations: v, stats };
}

/** Clients restart the answer at every `attempt` event: the text is the tokens after the last one. */
function answerText(events: StreamEvent[]): string {
  let text = '';
  for (const e of events) {
    if (e.type === 'attempt') text = '';
    else if (e.type === 'token') text += String(e.data.text);
  }
  return text;
}

function toEvent(id: string, fields: string[]): StreamEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i < fields.length; i += 2) f[fields[i]] = fields[i + 1];
  return { id, type: f.type, data: JSON.parse(f.data) };
}

function firstDiff(a: string[], b: string[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
