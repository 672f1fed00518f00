/** The run record: a Redis hash under the scope's hash tag, the source of truth for a run. */
import type {
  ArtifactAttachment, ArtifactDisposition, OnBudget, RunError, RunInput, RunResult, RunStatus, SessionMessage, UsageTotals,
} from '../contract/runs.ts';
import type { WaitEventEntry } from '../contract/events.ts';

export { RUN_STATUSES } from '../contract/runs.ts';
export type { ArtifactAttachment, ArtifactDisposition, RunError, RunInput, RunResult, RunStatus, SessionMessage };

export interface Blocked { stepKey: string; reason: string; since: number }

/** A pending wait as stored (`run:<id>:waits`); times are epoch ms. */
export type StoredWait = WaitEventEntry;

export interface RunRecord {
  id: string;
  scope: string;
  sessionId: string;
  runtime: string;
  agent: string;
  status: RunStatus;
  attempt: number;
  maxAttempts: number;
  fence: number;
  dispatch: number;
  recoveries: number;
  /** Milliseconds workers held the run in attempts that ended (MAX_RUN_MS bounds the sum). */
  runMs?: number;
  createdAt: number;
  updatedAt: number;
  startedAt?: number;
  finishedAt?: number;
  retryAt?: number;
  leaseOwner?: string;
  cancelRequested: boolean;
  input: RunInput;
  metadata?: Record<string, unknown>;
  /** Caller memory: any JSON value, handed to the agent, never stored in session state. */
  memory?: unknown;
  outputSchema?: Record<string, unknown>;
  idempotencyKey?: string;
  result?: RunResult;
  lastError?: RunError;
  blocked?: Blocked;
  /**
   * Model usage of the steps stored so far, in any attempt (record fields usageIn, usageOut,
   * usageCalls, added by the step script); absent before the first counted model call.
   */
  usage?: UsageTotals;
  /** Scheduled runs: when due. */
  runAt?: number;
  ttlMs?: number;
  timeoutMs?: number;
  /** 0-9 (absent: 5) and the concurrency key, as submitted (lib/admission.lua). */
  priority?: number;
  concurrencyKey?: string;
  /** What a model call past the scope's daily token budget does, as submitted (absent: fail). */
  onBudget?: OnBudget;
  /** ttlMs: the latest start (epoch ms), once the run is due. */
  startBy?: number;
  /** timeoutMs: the end of the budget while it counts (epoch ms). */
  deadlineAt?: number;
  /** timeoutMs: what is left of it while the run waits or is blocked. */
  budgetLeft?: number;
  /** Pending waits, when the reader asked for them (RunStore reads them with the record). */
  waits?: StoredWait[];
  /** The submit's span context (W3C traceparent), when it was traced: every attempt's span is its child. */
  traceparent?: string;
  /** A re-run (reruns.ts): the run it repeats, its fromStep, the non-idempotent steps it runs again. */
  rerunOf?: string;
  rerunFrom?: string;
  rerunNonIdempotent?: string[];
  /** The newest re-runs of this run (at most RERUNS_KEPT; the submit of each adds it), oldest first. */
  reruns?: string[];
  /** How many re-runs this run has had in all (the listing `rerunOf` shows every one). */
  rerunCount?: number;
}

/**
 * Re-runs a run record names (its `reruns` field): the newest 10. Enough for the runs a person
 * re-runs by hand (a fix, a retry, a change of input, each a link in the inspector); a run re-run
 * more often than that is re-run by a program, in a loop, whose re-runs are a listing
 * (GET …/runs?rerunOf=<id>, by the index `run:<id>:reruns`), not a field every read of the run
 * carries: 391 re-runs made the run's GET 11.4 KB when the field kept them all.
 */
export const RERUNS_KEPT = 10;

/**
 * The fields of a run the API shows (presentRun takes exactly these), and so the fields a
 * listing reads: not the caller memory, the output schema, the lease or the dispatch state,
 * which can be most of a record's bytes.
 */
export const SHOWN_FIELDS = [
  'id', 'scope', 'sessionId', 'runtime', 'agent', 'status', 'attempt', 'maxAttempts', 'recoveries',
  'createdAt', 'updatedAt', 'startedAt', 'finishedAt', 'retryAt', 'cancelRequested', 'input', 'metadata',
  'idempotencyKey', 'lastError', 'blocked', 'result', 'usage', 'runAt', 'ttlMs', 'timeoutMs', 'waits',
  'priority', 'concurrencyKey', 'onBudget', 'rerunOf', 'rerunFrom', 'rerunNonIdempotent', 'reruns', 'rerunCount',
] as const satisfies readonly (keyof RunRecord)[];

export type ShownRun = Pick<RunRecord, (typeof SHOWN_FIELDS)[number]>;

/** The hash fields a shown field is made from, where they are not the field itself (parseRunRecord derives it). */
const MADE_FROM: Partial<Record<(typeof SHOWN_FIELDS)[number], readonly string[]>> = {
  usage: ['usageIn', 'usageOut', 'usageCalls'],
  // Pending waits live in their own hash (`run:<id>:waits`), read beside the record.
  waits: [],
};

/** The run record's hash fields a listing reads: those of SHOWN_FIELDS. */
export const SHOWN_HASH_FIELDS: readonly string[] = SHOWN_FIELDS.flatMap((f) => MADE_FROM[f] ?? [f]);

const JSON_FIELDS = ['input', 'metadata', 'memory', 'outputSchema', 'result', 'lastError', 'blocked', 'rerunNonIdempotent'] as const;
const NUMBER_FIELDS = [
  'attempt', 'maxAttempts', 'fence', 'dispatch', 'recoveries', 'runMs', 'createdAt', 'updatedAt',
  'startedAt', 'finishedAt', 'retryAt', 'runAt', 'ttlMs', 'timeoutMs', 'startBy', 'deadlineAt', 'budgetLeft', 'priority',
] as const;

/** Turns HGETALL output (object or flat array) into a RunRecord; undefined when empty. */
export function parseRunRecord(raw: Record<string, string> | string[]): RunRecord | undefined {
  const h: Record<string, string> = Array.isArray(raw) ? flatToObject(raw) : raw;
  if (!h.status) return undefined;
  const r: Record<string, unknown> = { ...h };
  for (const f of JSON_FIELDS) if (h[f] !== undefined && h[f] !== '') r[f] = JSON.parse(h[f]);
  for (const f of NUMBER_FIELDS) if (h[f] !== undefined && h[f] !== '') r[f] = Number(h[f]);
  if (!r.leaseOwner) delete r.leaseOwner;
  r.cancelRequested = h.cancelRequested === '1';
  // Space-separated ids, appended by each re-run's submit (transitions/submit.lua). A record an earlier
  // version wrote holds every re-run and no count: its newest RERUNS_KEPT are shown, and the
  // count is how many it holds.
  if (h.reruns) {
    const ids = h.reruns.split(' ');
    r.reruns = ids.slice(-RERUNS_KEPT);
    r.rerunCount = h.rerunCount ? Number(h.rerunCount) : ids.length;
  } else delete r.rerunCount;
  const calls = Number(h.usageCalls ?? 0);
  if (calls > 0) {
    const inputTokens = Number(h.usageIn ?? 0);
    const outputTokens = Number(h.usageOut ?? 0);
    r.usage = { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens, modelCalls: calls };
  }
  return r as unknown as RunRecord;
}

/** The pending waits of a `run:<id>:waits` hash (HGETALL), oldest first. */
export function parseWaits(raw: Record<string, string>): StoredWait[] {
  const waits: StoredWait[] = [];
  for (const [field, text] of Object.entries(raw)) {
    if (field.includes('#')) continue;
    const w = JSON.parse(text) as StoredWait;
    waits.push({
      key: w.key, kind: w.kind, name: w.name, since: w.since,
      ...(w.prompt !== undefined ? { prompt: w.prompt } : {}),
      ...(w.schema !== undefined ? { schema: w.schema } : {}),
      ...(w.expiresAt !== undefined ? { expiresAt: w.expiresAt } : {}),
    });
  }
  return waits.sort((a, b) => a.since - b.since || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

export function flatToObject(flat: string[]): Record<string, string> {
  const o: Record<string, string> = {};
  for (let i = 0; i < flat.length; i += 2) o[flat[i]] = flat[i + 1];
  return o;
}

/**
 * A new run's record as its submit writes it, the one encoding of the run that crosses to Lua
 * (the submit unit, submit.ts, sends it as ARGV[2..]; transitions/submit.lua reads it once, at its top, and adds the
 * fields of the run's state: createdAt, status, attempt, fence...). JSON fields are JSON text
 * already; numbers go as their decimal text, as Redis stores them. The order of the members is
 * the order the fields are written; a member left undefined is not written.
 */
export interface NewRunRecord {
  id: string;
  scope: string;
  sessionId: string;
  runtime: string;
  agent: string;
  /** The submit's, else the deployment's default (the first claim then applies the agent's own unless maxAttemptsSet). */
  maxAttempts: number;
  /** RunInput, as JSON. */
  input: string;
  /** The attached artifacts' ids alone, as a JSON list: what pinArtifacts (transitions/lib/storage.lua) keeps alive. */
  artifactIds?: string;
  metadata?: string;
  memory?: string;
  outputSchema?: string;
  idempotencyKey?: string;
  /** 1: the submit set maxAttempts (transitions/claim.lua keeps it). */
  maxAttemptsSet?: 1;
  ttlMs?: number;
  timeoutMs?: number;
  priority?: number;
  concurrencyKey?: string;
  /** Read by the worker's budget check (context.ts); absent is `fail`. */
  onBudget?: string;
  /** The submit span's context (tracing/tracing.ts): the parent of every attempt's span. */
  traceparent?: string;
  /** A re-run (reruns.ts): the run it repeats, its fromStep, its non-idempotent steps run again (JSON list). */
  rerunOf?: string;
  rerunFrom?: string;
  rerunNonIdempotent?: string;
}

/** A new run's record as name/value text pairs, in its order, the fields not set left out (ARGV[2..] of transitions/submit.lua). */
export function newRunPairs(rec: NewRunRecord): string[] {
  return Object.entries(rec).flatMap(([name, value]) => (value === undefined ? [] : [name, String(value)]));
}
