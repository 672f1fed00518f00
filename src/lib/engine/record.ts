/** The run record: a Redis hash under the scope's hash tag, the source of truth for a run. */

export const RUN_STATUSES = [
  'queued', 'dispatched', 'running', 'retrying', 'blocked', 'succeeded', 'failed', 'cancelled',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<RunStatus> = new Set(['succeeded', 'failed', 'cancelled']);

export interface RunInput {
  content: string;
  /** Input artifacts the submit attached (uploaded before, in the same scope). */
  artifacts?: ArtifactAttachment[];
}

/** `inline`: the agent gets the bytes; `reference`: only the id and metadata. Default inline. */
export type ArtifactDisposition = 'inline' | 'reference';

export interface ArtifactAttachment { id: string; disposition?: ArtifactDisposition }

export interface RunResult {
  answer: string;
  /** 'stop' (goal reached), 'length' (truncated), 'cancelled', 'error'. */
  finishReason: string;
  toolCallsSeen: number;
  payload?: unknown;
}

export interface RunError { code: string; message: string; details?: unknown }

export interface Blocked { stepKey: string; reason: string; since: number }

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
  createdAt: number;
  updatedAt: number;
  startedAt?: number;
  finishedAt?: number;
  retryAt?: number;
  leaseOwner?: string;
  leaseExpiresAt?: number;
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
}

const JSON_FIELDS = ['input', 'metadata', 'memory', 'outputSchema', 'result', 'lastError', 'blocked'] as const;
const NUMBER_FIELDS = [
  'attempt', 'maxAttempts', 'fence', 'dispatch', 'recoveries', 'createdAt', 'updatedAt',
  'startedAt', 'finishedAt', 'retryAt', 'leaseExpiresAt',
] as const;

/** Turns HGETALL output (object or flat array) into a RunRecord; undefined when empty. */
export function parseRunRecord(raw: Record<string, string> | string[]): RunRecord | undefined {
  const h: Record<string, string> = Array.isArray(raw) ? flatToObject(raw) : raw;
  if (!h.status) return undefined;
  const r: Record<string, unknown> = { ...h };
  for (const f of JSON_FIELDS) if (h[f] !== undefined && h[f] !== '') r[f] = JSON.parse(h[f]);
  for (const f of NUMBER_FIELDS) if (h[f] !== undefined && h[f] !== '') r[f] = Number(h[f]);
  if (!r.leaseOwner) delete r.leaseOwner;
  if (!r.leaseExpiresAt) delete r.leaseExpiresAt;
  r.cancelRequested = h.cancelRequested === '1';
  return r as unknown as RunRecord;
}

export function flatToObject(flat: string[]): Record<string, string> {
  const o: Record<string, string> = {};
  for (let i = 0; i < flat.length; i += 2) o[flat[i]] = flat[i + 1];
  return o;
}

/** A message of a session's committed history. */
export interface SessionMessage {
  role: 'user' | 'assistant';
  content: string;
  runId: string;
  createdAt: number;
  incomplete?: boolean;
}
