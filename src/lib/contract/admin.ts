/** API key roles, runtimes and the operator actions on one (scope, runtime) pair, as the API shows them. */
import type { UsageTotals } from './runs.ts';

/** The roles of a scope's keys. client: submit, read, stream, cancel; admin: that plus stats, drain and resolving blocked steps. */
export const SCOPE_ROLES = ['client', 'admin'] as const;
export type ScopeRole = (typeof SCOPE_ROLES)[number];

/**
 * Every role a key may have: a scope's two, and `operator`, a key bound to no scope that may
 * call the operator routes only (a scope's limits, whoami) and never a tenant's runs or data.
 */
export const ROLES = [...SCOPE_ROLES, 'operator'] as const;
export type Role = (typeof ROLES)[number];

/** A runtime as one scope sees it (`GET /v1/scopes/{scope}/runtimes`). */
export interface RuntimeView {
  runtimeId: string;
  liveWorkers: number;
  agents: string[];
  concurrency: number;
  /** ISO time of the newest heartbeat of any of its workers. */
  lastSeenAt: string;
  /** Whether this scope drained the runtime. */
  draining: boolean;
}

export interface RuntimeStats {
  scope: string;
  runtimeId: string;
  /** Current counts by public status (dispatched shows as queued); terminal counts are cumulative. */
  counts: {
    scheduled: number; queued: number; running: number; retrying: number; waiting: number; blocked: number;
    succeeded: number; failed: number; cancelled: number; expired: number;
  };
  /** Age of the run that has waited longest to start; null when none waits. */
  oldestQueuedAgeMs: number | null;
  draining: boolean;
  /** Live workers of the runtime (they serve every scope). */
  liveWorkers: number;
  /**
   * Agents of this scope's runs waiting to start that no live worker of the runtime serves
   * ("no worker for agent X"), oldest first, among the 1,000 runs that waited longest: their
   * runs wait for such a worker and fail UNKNOWN_AGENT after AGENT_GRACE_MS without one.
   */
  unservedAgents: { agent: string; runs: number; oldestAgeMs: number }[];
}

export interface DrainResult { scope: string; runtimeId: string; draining: true; cancelled: number }
export interface ResumeResult { scope: string; runtimeId: string; draining: false; resumed: number }

/** What `GET /v1/whoami` says about the presented key: an operator key has no scope (null). */
export interface WhoAmI { scope: string | null; role: Role; keyId: string }

/** A scope's limits, named as Redis (the scope's `limits` hash) and the API name them. */
export const LIMIT_FIELDS = [
  'maxActive', 'maxActivePerKey', 'submitRatePerSec', 'submitBurst', 'weight', 'maxStreams', 'tokensPerDay',
  'readBytesPerSec', 'readBurstBytes',
  'maxQueuedRuns', 'maxStoredBytes', 'forksPerMinute', 'forkBytesPerMinute', 'retentionMs',
] as const;
export type LimitField = (typeof LIMIT_FIELDS)[number];

/**
 * One value of each limit. maxActivePerKey, tokensPerDay and the storage caps and fork rates
 * may be null: none. submitRatePerSec 0 (only ever a configured default) is no submit rate limit.
 */
export interface ScopeLimits {
  /** Runs of the scope dispatched or running at once. */
  maxActive: number;
  /** Runs of one concurrencyKey of the scope active at once. */
  maxActivePerKey: number | null;
  /** The scope's submit token bucket: its rate, and its size. */
  submitRatePerSec: number;
  submitBurst: number;
  /** The scope's weight when worker slots, and a provider rate-limit bucket's grants, are shared among scopes that want them. */
  weight: number;
  /** Event streams of the scope open at once, per API process. */
  maxStreams: number;
  /** Model tokens the scope may use in a UTC day. */
  tokensPerDay: number | null;
  /**
   * The scope's read budget, a token bucket of bytes: its rate, and its size. Each costly read
   * (history pages, listings) takes its answer's bytes past READ_FREE_BYTES; in debt, they are
   * refused. readBytesPerSec 0 (only ever a configured default) is no read budget.
   */
  readBytesPerSec: number;
  readBurstBytes: number;
  /** Runs of the scope accepted and not started (queued or dispatched) at once; null: none. */
  maxQueuedRuns: number | null;
  /** Bytes of its own input the scope stores: runs' records until they expire, forks' copies; null: none. */
  maxStoredBytes: number | null;
  /** Forks of the scope's sessions a minute, and the bytes of history they copy; null: none. */
  forksPerMinute: number | null;
  forkBytesPerMinute: number | null;
  /** Ms a finished run of the scope (its record, event log and steps) stays readable. */
  retentionMs: number;
}

/** `GET/PUT /v1/scopes/{scope}/limits`: a scope's limits, where each comes from, and how much is in use. */
export interface ScopeLimitsView {
  scope: string;
  /** The value in force of every limit: the operator's where set, else the configured default. */
  limits: ScopeLimits;
  /** The operator's overrides only (a field absent: its default applies). */
  set: Partial<ScopeLimits>;
  /** The configured defaults (MAX_ACTIVE_PER_SCOPE, MAX_ACTIVE_PER_KEY, ...). */
  defaults: ScopeLimits;
  inUse: {
    /** Runs of the scope dispatched or running now. */
    active: number;
    /** Runnable runs held back by a limit (written by the scheduler), 0 when none was written. */
    parked: number;
    /** The scope's share of worker slots (written by the scheduler), null when none was written. */
    share: number | null;
    /** Event streams of the scope open on the API process that answered. */
    streams: number;
    /** Model tokens (input and output) the scope used today (UTC), what tokensPerDay is checked against. */
    tokensToday: number;
    /** Bytes the scope's read bucket holds now: readBurstBytes when unused, below 0 while its costly reads are refused. */
    readBytesLeft: number;
    /** Runs of the scope queued or dispatched now, what maxQueuedRuns is checked against. */
    queuedRuns: number;
    /** Bytes the scope stores, what maxStoredBytes is checked against (as of the last submit or fork that looked). */
    storedBytes: number;
  };
}

/** A scope's model usage of one day (UTC), one agent and one model. */
export interface UsageRow extends UsageTotals {
  /** YYYY-MM-DD, UTC: the day the call's result was stored. */
  day: string;
  /** The agent that made the call: the run's agent, or the sub-agent it ran through ctx.subagent. */
  agent: string;
  model: string;
}

/** `GET /v1/scopes/{scope}/usage?from=&to=`: rows by day, agent and model (days without usage left out). */
export interface ScopeUsage {
  scope: string;
  from: string;
  to: string;
  rows: UsageRow[];
  /** The sum of this page's rows: the range's total when the page is its only one (no cursor given, nextCursor null). */
  total: UsageTotals;
  /** Set when more rows follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`. */
  nextCursor: string | null;
  /** The scope's daily token budget today (whatever `from` and `to` are), null when it has none. */
  budget: TokenBudget | null;
}

/**
 * A scope's daily token budget (its `tokensPerDay` limit) and what is left of it today (UTC).
 * A model call that would take the scope past it is refused before it is made.
 */
export interface TokenBudget {
  tokensPerDay: number;
  /** Input and output tokens of the scope's model calls counted today. */
  usedToday: number;
  /** tokensPerDay - usedToday, never below 0 (concurrent calls may overshoot the budget a little). */
  left: number;
  /** The next UTC midnight (ISO), when a new day's budget starts. */
  resetsAt: string;
}

/**
 * A model provider's rate-limit bucket (RATE_LIMITS), shared by every worker and every scope,
 * as an operator sees it (`GET /v1/rate-limits`, and the answer of a pause or a resume).
 */
export interface RateLimitBucket {
  bucket: string;
  /** Requests and tokens a minute the provider may see (RATE_LIMITS); null: not limited that way. */
  rpm: number | null;
  tpm: number | null;
  /** The bucket's burst factor (its `burst:`, else RATE_LIMIT_BURST) and the spread it makes: requests and tokens in any one second. */
  burst: number;
  perSecond: { requests: number | null; tokens: number | null };
  /** What the bucket's window holds now: grants, their tokens (as settled, or reserved by calls in flight), the part reserved. */
  requests: number;
  tokens: number;
  reservedTokens: number;
  /** What the last second holds: grants and their tokens. */
  lastSecond: { requests: number; tokens: number };
  /** Scopes waiting for the bucket now: how many, and the first 20 in the order they are served. */
  waiting: { count: number; scopes: string[] };
  /**
   * null: not paused. `untilMs` (epoch ms) null: paused until an operator resumes it; `sinceMs`
   * when it was set (null: not known); `askedMs` a provider's Retry-After (null: an operator's
   * pause), and `capped` whether it asked for longer than RATE_LIMIT_PAUSE_MAX_MS, which is what it got.
   */
  paused: { by: 'provider' | 'operator'; untilMs: number | null; sinceMs: number | null; askedMs: number | null; capped: boolean } | null;
}

/** `GET /v1/rate-limits`: every bucket RATE_LIMITS defines, the window their counts cover, and the cap on a provider's pause. */
export interface RateLimitsView {
  windowMs: number;
  providerPauseMaxMs: number;
  buckets: RateLimitBucket[];
}

/** `POST /v1/rate-limits/{bucket}/pause`: until a time, for a while, or (neither) until resumed. */
export interface RateLimitPause {
  untilMs?: number;
  forMs?: number;
}
