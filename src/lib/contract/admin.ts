/** API key roles, runtimes and the operator actions on one (scope, runtime) pair, as the API shows them. */
import type { UsageTotals } from './runs.ts';

/** client: submit, read, stream, cancel; admin: that plus stats, drain and resolving blocked steps. */
export const ROLES = ['client', 'admin'] as const;
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

/** What `GET /v1/whoami` says about the presented key. */
export interface WhoAmI { scope: string; role: Role; keyId: string }

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
}
