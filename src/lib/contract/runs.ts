/** The run, the submit request and the session history as the API shows them. */

/** Every status a run record can have; `dispatched` is internal (shown as queued). */
export const RUN_STATUSES = [
  'queued', 'dispatched', 'running', 'retrying', 'blocked', 'succeeded', 'failed', 'cancelled',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export const PUBLIC_RUN_STATUSES = ['queued', 'running', 'retrying', 'blocked', 'succeeded', 'failed', 'cancelled'] as const;
export type PublicRunStatus = (typeof PUBLIC_RUN_STATUSES)[number];

export const TERMINAL_STATUSES = ['succeeded', 'failed', 'cancelled'] as const;
export type TerminalStatus = (typeof TERMINAL_STATUSES)[number];

export const MULTITASK_STRATEGIES = ['enqueue', 'reject', 'interrupt'] as const;
export type Multitask = (typeof MULTITASK_STRATEGIES)[number];

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
  /** The run's model calls, in every attempt; absent when it made none Baton was told of. */
  usage?: UsageTotals;
}

/**
 * Token usage as the providers reported it, summed over model calls. A call counts once, when
 * its result is stored: a retry or recovery that takes it from the memo adds nothing.
 */
export interface UsageTotals {
  inputTokens: number;
  outputTokens: number;
  /** inputTokens + outputTokens. */
  totalTokens: number;
  modelCalls: number;
}

export interface RunError { code: string; message: string; details?: unknown }

/**
 * `lastError.code`s Baton itself sets when it ends a run for the service's sake rather than
 * the agent's (an agent's own errors carry their own codes). README, "Limits", lists them.
 */
export const RUN_LIMIT_CODES = {
  /** The run's workers were lost (leases ran out) more than MAX_RECOVERIES times. */
  RECOVERY_LIMIT: 'RECOVERY_LIMIT',
  /** Workers held the run for MAX_RUN_MS in all. */
  RUN_TIMEOUT: 'RUN_TIMEOUT',
  /** Closing an attempt threw (a result or store Baton could not write); the run failed instead of staying leased. */
  CLOSE_FAILED: 'CLOSE_FAILED',
} as const;

/** Submit body of `POST /v1/scopes/{scope}/runs`. */
export interface SubmitRequest {
  sessionId: string;
  input: RunInput;
  /** Default `default`. */
  runtime?: string;
  /** Default `echo`. */
  agent?: string;
  metadata?: Record<string, unknown>;
  /** Any JSON value except null; reaches the agent as ctx.memory, never stored in the session. */
  memory?: unknown;
  maxAttempts?: number;
  idempotencyKey?: string;
  /** What to do when the session is busy; default `enqueue`. */
  multitask?: Multitask;
  outputSchema?: Record<string, unknown>;
  /** Also mint a stream token for the new run, returned as the answer's `streamToken`. */
  streamToken?: boolean;
}

/**
 * A read-only pass for a browser page, in place of an API key: `?access_token=<token>` on the
 * events route of one run (`runId`) or of any run of one session (`sessionId`), until
 * `expiresAt`. It opens nothing else.
 */
export interface StreamToken {
  token: string;
  expiresAt: string;
  runId?: string;
  sessionId?: string;
}

/** A run as the API shows it: no lease internals, no caller memory echo; times are ISO strings. */
export interface Run {
  id: string;
  scope: string;
  sessionId: string;
  runtime: string;
  agent: string;
  status: PublicRunStatus;
  attempt: number;
  maxAttempts: number;
  recoveries: number;
  createdAt: string;
  updatedAt: string;
  startedAt?: string;
  finishedAt?: string;
  retryAt?: string;
  cancelRequested?: boolean;
  input: RunInput;
  metadata?: Record<string, unknown>;
  idempotencyKey?: string;
  lastError?: RunError;
  blocked?: { stepKey: string; reason: string; since: string };
  result?: RunResult;
  links: { self: string; events: string };
  /** Submit only: e.g. that no live worker serves the runtime yet. */
  warnings?: string[];
  /** Submit only, when asked with `streamToken: true`: a token for this run's events. */
  streamToken?: StreamToken;
}

export interface RunsPage { runs: Run[]; nextCursor: string | null }

/** A message of a session's committed history. */
export interface SessionMessage {
  role: 'user' | 'assistant';
  content: string;
  runId: string;
  createdAt: number;
  /** The answer was cut short (error, cancel, truncation). */
  incomplete?: boolean;
}

export interface MessagesPage { messages: SessionMessage[]; nextCursor: string | null }

/** A memoized step of a run, as `GET …/runs/{runId}/steps` shows it (times are ISO strings). */
export interface Step {
  /** `<kind>:<name>:<n>`: the n-th call of that name in the run. */
  key: string;
  kind: 'step' | 'infer' | 'tool';
  name: string;
  n: number;
  /** done: its result is stored; started: a non-idempotent step began and stored no result (yet). */
  status: 'done' | 'started';
  value?: unknown;
  /** The text an inference streamed (replayed into the answer when the memo is hit). */
  streamed?: string;
  startedAt?: string;
  finishedAt?: string;
}

export interface StepsPage { steps: Step[] }
