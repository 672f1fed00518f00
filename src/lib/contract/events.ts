import type { PublicRunStatus, RunError, RunResult, TerminalStatus, WaitKind } from './runs.ts';

/** The events of a run's stream. Every event has the stream id a client resumes from. */
export type RunStreamEvent =
  | { id: string; type: 'status'; data: StatusEventData }
  /** A new attempt starts (first try, retry or recovery): discard the text of earlier attempts. */
  | { id: string; type: 'attempt'; data: AttemptEventData }
  | { id: string; type: 'token'; data: { text: string } }
  /** Streamed to the reader, never part of the answer (error notices and the like). */
  | { id: string; type: 'ephemeral'; data: { text: string } }
  /** The last event of every run: its final status and result. */
  | { id: string; type: 'end'; data: EndEventData }
  /** An event type this client version does not know (`name` is its SSE event name). */
  | { id: string; type: 'unknown'; name: string; data: unknown };

export interface StatusEventData {
  status: PublicRunStatus | 'recovered';
  attempt?: number;
  maxAttempts?: number;
  retryAt?: number;
  lastError?: RunError;
  recoveries?: number;
  blocked?: { stepKey: string; reason: string; since: number };
  resumed?: boolean;
  resolved?: { stepKey: string; mode: 'value' | 'rerun' };
  /** `waiting`: the waits the run waits on (times in epoch ms; no resume tokens in the stream). */
  waits?: WaitEventEntry[];
  /** `queued` after a wait: which one let the run go on, and how. */
  wait?: { key: string; outcome: 'resumed' | 'timed-out' | 'slept' };
  /** `scheduled`: when the run is due (epoch ms). */
  runAt?: number;
}

/** A pending wait as a `status: waiting` event carries it. */
export interface WaitEventEntry {
  key: string;
  kind: WaitKind;
  name: string;
  prompt?: unknown;
  schema?: Record<string, unknown>;
  since: number;
  expiresAt?: number;
}

export interface AttemptEventData { attempt: number; maxAttempts: number; recovered?: boolean; resumed?: boolean }

export interface EndEventData { status: TerminalStatus; result: RunResult; error?: RunError }

/** SSE event names a run's stream carries. */
export const RUN_EVENT_TYPES = ['status', 'attempt', 'token', 'ephemeral', 'end'] as const;
