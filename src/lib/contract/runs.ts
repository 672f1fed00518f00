/** The run, the submit request and the session history as the API shows them. */

/**
 * Every status a run record can have; `dispatched` is internal (shown as queued). `waiting`:
 * the run waits for input, an approval or a timer and holds no worker; `scheduled`: submitted
 * with runAt/delayMs and not due yet; `expired`: its ttlMs passed before it started.
 */
export const RUN_STATUSES = [
  'scheduled', 'queued', 'dispatched', 'running', 'retrying', 'waiting', 'blocked', 'succeeded', 'failed', 'cancelled', 'expired',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export const PUBLIC_RUN_STATUSES = [
  'scheduled', 'queued', 'running', 'retrying', 'waiting', 'blocked', 'succeeded', 'failed', 'cancelled', 'expired',
] as const;
export type PublicRunStatus = (typeof PUBLIC_RUN_STATUSES)[number];

export const TERMINAL_STATUSES = ['succeeded', 'failed', 'cancelled', 'expired'] as const;
export type TerminalStatus = (typeof TERMINAL_STATUSES)[number];

export const MULTITASK_STRATEGIES = ['enqueue', 'reject', 'interrupt', 'steer'] as const;
export type Multitask = (typeof MULTITASK_STRATEGIES)[number];

/** A steering message's id (`messageId` of a submit with multitask `steer`). */
export const STEERING_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/**
 * What became of a steering message (docs/steering.md): `pending` in the run `runId` until
 * its next boundary, `delivered` there at boundary `step`, `not-delivered` because the run
 * ended first (`reason`: its status; the message is the run `turnRunId`, queued next in the
 * session), or `turn`: the session had no active run, so the message is the run `runId`.
 */
export interface SteeringOutcome {
  messageId: string;
  runId: string;
  outcome: 'pending' | 'delivered' | 'not-delivered' | 'turn';
  step?: number;
  reason?: string;
  turnRunId?: string;
}

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
  /** 'stop' (goal reached), 'length' (truncated), 'cancelled', 'error', 'timeout' (timeoutMs used up), 'expired' (ttlMs passed). */
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

/** One model's share of a run's usage, and its cost where MODEL_PRICES prices the model. */
export interface ModelUsage extends UsageTotals {
  model: string;
  /** USD, by MODEL_PRICES; absent when the table is not set or has no price for the model. */
  costUsd?: number;
}

/** `GET /v1/scopes/{scope}/runs/{runId}/usage`: a run's model usage so far, by model, and its cost. */
export interface RunUsage {
  runId: string;
  /** Every model call of the run, in any attempt, counted once (all zero before the first). */
  total: UsageTotals;
  /** The same calls by model, in model id order. */
  models: ModelUsage[];
  /** USD, by MODEL_PRICES: present when the table is set and prices every model the run called. */
  costUsd?: number;
  /** Models the run called that MODEL_PRICES has no price for (only when the table is set). */
  unpriced?: string[];
}

export interface RunError { code: string; message: string; details?: unknown }

/**
 * `lastError.code`s Baton itself sets when it ends a run for the service's sake rather than
 * the agent's (an agent's own errors carry their own codes). docs/tenancy.md, "Runs", lists them.
 */
export const RUN_LIMIT_CODES = {
  /** The run's workers were lost (leases ran out) more than MAX_RECOVERIES times. */
  RECOVERY_LIMIT: 'RECOVERY_LIMIT',
  /** Workers held the run for MAX_RUN_MS in all. */
  RUN_TIMEOUT: 'RUN_TIMEOUT',
  /** Closing an attempt threw (a result or store Baton could not write); the run failed instead of staying leased. */
  CLOSE_FAILED: 'CLOSE_FAILED',
  /** No live worker of the run's runtime served its agent for AGENT_GRACE_MS. */
  UNKNOWN_AGENT: 'UNKNOWN_AGENT',
  /** The agent reached a wait while MAX_WAITS_PER_RUN others were pending. */
  TOO_MANY_WAITS: 'TOO_MANY_WAITS',
  /**
   * A model call would have taken the scope past its daily token budget (`tokensPerDay`), so it
   * was not made (with `onBudget: "wait"`: only a call that no whole day's budget could take).
   */
  BUDGET_EXCEEDED: 'BUDGET_EXCEEDED',
  /** A model call reserves more tokens than its provider rate-limit bucket grants in a minute (its tpm): it could never be made. */
  RATE_LIMIT_TOO_LARGE: 'RATE_LIMIT_TOO_LARGE',
} as const;

/**
 * What a run does at a model call its scope's daily token budget refuses: `fail` (the
 * default) fails it with BUDGET_EXCEEDED; `wait` parks it, holding no worker, until the next
 * UTC day's budget, then makes the call.
 */
export const ON_BUDGET = ['fail', 'wait'] as const;
export type OnBudget = (typeof ON_BUDGET)[number];

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
  /** With multitask `steer`: the message's id, so a resend answers the first outcome (default: a new id). */
  messageId?: string;
  outputSchema?: Record<string, unknown>;
  /**
   * Start no earlier than this ISO time (`runAt`) or this many ms after the submit (`delayMs`),
   * at most one of them: the run is `scheduled` until then, then queues in its session like a
   * new run. Only with multitask `enqueue`.
   */
  runAt?: string;
  delayMs?: number;
  /** A run not started within this many ms of being due (the submit, or runAt) ends `expired`. */
  ttlMs?: number;
  /**
   * Wall time budget from the first start, time spent waiting (waits, sleeps, a block)
   * excluded: at its end the agent's ctx.signal aborts and the run fails with TIMEOUT.
   */
  timeoutMs?: number;
  /**
   * 0-9, default 5: among the scope's runs waiting for a slot (of one concurrency key), higher
   * first, then oldest; a run is never passed by one that became due more than
   * (9 - its priority) × PRIORITY_STEP_MS after it.
   */
  priority?: number;
  /**
   * An end user, an organisation: runs of one key hold at most the scope's maxActivePerKey
   * slots, and the keys with runs waiting take turns for the scope's free slots.
   */
  concurrencyKey?: string;
  /** Also mint a stream token for the new run, returned as the answer's `streamToken`. */
  streamToken?: boolean;
  /** A model call past the scope's daily token budget: fail the run (default) or wait for the next day. */
  onBudget?: OnBudget;
  /**
   * Queue the run even if no worker of its runtime offered its agent in the last day (the agent
   * is deployed later): without it such a submit is refused with 422 UNKNOWN_AGENT, which names
   * the agents the runtime has (a typo fails at once). Either way the run fails UNKNOWN_AGENT
   * if no live worker serves its agent for AGENT_GRACE_MS.
   */
  awaitAgent?: boolean;
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

/**
 * What a wait is for: a person's or a system's input, an approval of a tool call, a timer
 * (ctx.sleep), or the next UTC day's token budget (a model call refused with `onBudget: "wait"`).
 * Sleeps and budget waits end by themselves: no resume, no token.
 */
export const WAIT_KINDS = ['input', 'approval', 'sleep', 'budget'] as const;
export type WaitKind = (typeof WAIT_KINDS)[number];

/** A pending wait of a run (`run.waits`): what it waits for and how to resume it. */
export interface Wait {
  /** `wait:<name>:<n>`: the n-th wait of that name in the run; resume it by this key. */
  key: string;
  kind: WaitKind;
  name: string;
  /** What the agent asks (an approval's prompt is the tool call's arguments). */
  prompt?: unknown;
  /** The JSON Schema a resume value must match (an approval's is `{approved, reason?}`). */
  schema?: Record<string, unknown>;
  since: string;
  /** When the wait times out (or a sleep ends). */
  expiresAt?: string;
  /**
   * Resumes this wait once, without an API key: `POST /v1/waits/{token}`. Shown only to keys
   * of the scope; a sleep has none.
   */
  token?: string;
}

/** Body of `POST …/runs/{runId}/waits/{waitKey}` and `POST /v1/waits/{token}`. */
export interface WaitResumeRequest { value: unknown }

/** The value an approval wait takes. */
export interface ApprovalDecision { approved: boolean; reason?: string }

/** What `POST /v1/waits/{token}` answers: the wait it resumed (the token holder sees nothing else of the run). */
export interface WaitResumed { runId: string; waitKey: string; resumed: true }

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
  /** Pending waits (status `waiting`, or answered ones the run has not reached again yet). */
  waits?: Wait[];
  /** A scheduled run's due time. */
  runAt?: string;
  ttlMs?: number;
  timeoutMs?: number;
  priority?: number;
  concurrencyKey?: string;
  /** As submitted (absent: `fail`). */
  onBudget?: OnBudget;
  result?: RunResult;
  /** A re-run: the run it repeats, and the step it was re-run from (absent: from the start). */
  rerunOf?: string;
  rerunFrom?: string;
  /** A re-run: its non-idempotent steps that run again (allowed by `allowNonIdempotent`). */
  rerunNonIdempotent?: string[];
  /** The newest re-runs of this run (at most 10), oldest first; the run listing's `rerunOf` filter lists every one. */
  reruns?: string[];
  /** How many re-runs this run has had in all. */
  rerunCount?: number;
  links: { self: string; events: string };
  /** Submit only: e.g. that no live worker serves the runtime yet. */
  warnings?: string[];
  /** Submit only, when asked with `streamToken: true`: a token for this run's events. */
  streamToken?: StreamToken;
  /** Submit with multitask `steer` only: the message and what became of it. */
  steering?: SteeringOutcome;
}

/**
 * Body of `POST …/runs/{runId}/rerun`: a new run of the run's session, agent, input and
 * options, with these overrides. The steps that started before `fromStep` (a step key of the
 * run) keep their results; from it on everything runs.
 */
export interface RerunRequest {
  fromStep?: string;
  /** Needed when the re-run would run a non-idempotent step of the run again. */
  allowNonIdempotent?: boolean;
  input?: RunInput;
  metadata?: Record<string, unknown>;
  memory?: unknown;
  maxAttempts?: number;
  timeoutMs?: number;
  priority?: number;
  idempotencyKey?: string;
  /** As the submit's: queue the re-run even if no worker of the runtime offered its agent in the last day. */
  awaitAgent?: boolean;
}

/** Body of `POST …/sessions/{sessionId}/fork`: where the fork branches (one of the two), and its session id. */
export interface ForkRequest {
  /** The fork keeps turns 1..atTurn of the session's committed history. */
  atTurn?: number;
  /** The fork keeps the turns up to and including the one this run committed. */
  atRunId?: string;
  /** The new session's id; absent: one is made. */
  sessionId?: string;
}

/** What a fork answers: the new session and what it holds. */
export interface SessionFork {
  sessionId: string;
  forkedFrom: string;
  /** Turns and messages copied. */
  turns: number;
  messages: number;
  /** The last run whose turn was copied. */
  atRunId: string;
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
  /** `wait`: a wait that was answered (its value), timed out (`timedOut`) or a sleep that ended. */
  kind: 'step' | 'infer' | 'tool' | 'wait';
  name: string;
  n: number;
  /** done: its result is stored; started: a non-idempotent step began and stored no result (yet). */
  status: 'done' | 'started';
  value?: unknown;
  /** The text an inference streamed (replayed into the answer when the memo is hit). */
  streamed?: string;
  /** A wait that timed out instead of being answered. */
  timedOut?: boolean;
  startedAt?: string;
  finishedAt?: string;
}

/** A page of a run's steps: at most `limit` and PAGE_MAX_BYTES of values; `nextCursor` (a page that stopped on either) goes in `cursor`. */
export interface StepsPage { steps: Step[]; nextCursor: string | null }
