import type { PublicRunStatus, RunError, RunResult, TerminalStatus, WaitKind } from './runs.ts';

/** The events of a run's stream. Every event has the stream id a client resumes from. */
export type RunStreamEvent =
  | { id: string; type: 'status'; data: StatusEventData }
  /** A new attempt starts (first try, retry or recovery): discard the text of earlier attempts. */
  | { id: string; type: 'attempt'; data: AttemptEventData }
  | { id: string; type: 'token'; data: TextEventData }
  /** Streamed to the reader, never part of the answer (error notices and the like). */
  | { id: string; type: 'ephemeral'; data: TextEventData }
  /** A model asked for a tool; streamed when the agent selects it, never part of the history. */
  | { id: string; type: 'tool-call'; data: ToolCallEventData }
  /** What a tool call gave back (or why it did not run); streamed when selected, never in the history. */
  | { id: string; type: 'tool-result'; data: ToolResultEventData }
  /** Named data the agent streamed (`ctx.emitData`), never part of the answer or the history. */
  | { id: string; type: 'data'; data: DataEventData }
  /** A steering message sent to the run (`pending`), taken at a boundary (`delivered`) or not (`not-delivered`). */
  | { id: string; type: 'steering'; data: SteeringEventData }
  /** The last event of every run: its final status and result. */
  | { id: string; type: 'end'; data: EndEventData }
  /** An event type this client version does not know (`name` is its SSE event name). */
  | { id: string; type: 'unknown'; name: string; data: unknown };

/**
 * Who said it: the agent (the run's agent, or a sub-agent it runs through `ctx.subagent`)
 * and the role of the message: `assistant` for its text, notices and tool calls, `tool`
 * for tool results.
 */
export const EVENT_ROLES = ['assistant', 'tool'] as const;
export type EventRole = (typeof EVENT_ROLES)[number];

export interface Speaker { agent: string; role: EventRole }

export interface TextEventData extends Speaker { text: string }

export interface ToolCallEventData extends Speaker {
  /** The model's id for the call; its tool-result carries the same one. */
  callId: string;
  name: string;
  /** The arguments as the model sent them (parsed when they were JSON). */
  args: unknown;
  /** `args` was larger than the event limit: it holds the start of its JSON text instead. */
  truncated?: true;
}

export type ToolResultEventData = Speaker & { callId: string; name: string; truncated?: true } & (
  | { ok: true; result: unknown }
  /** The tool was not run (bad arguments, unknown tool, `declined` by a person) or it failed. */
  | { ok: false; error: string; declined?: true }
);

export interface DataEventData extends Speaker {
  /** What the data is (`weather`): a chat page sees it as a `data-<name>` part. */
  name: string;
  data: unknown;
  /** Data of one name and id replaces the earlier one (a progress bar, say) instead of adding one. */
  dataId?: string;
  /** For the live reader only: a chat page gets it in `onData`, not as a part of the message. */
  transient?: true;
}

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
  /**
   * `waiting`: the waits first reached in this park (times in epoch ms; no resume tokens in the
   * stream); those pending since an earlier park are not repeated. The run's `waits` lists all.
   */
  waits?: WaitEventEntry[];
  /** `waiting`: how many waits pend in all. */
  pending?: number;
  /** `waiting`: waits that stopped pending because the run did not reach them again (it took another path). */
  dropped?: string[];
  /** `queued` after a wait: which one let the run go on, and how. */
  wait?: { key: string; outcome: 'resumed' | 'timed-out' | 'slept' };
  /** `scheduled`: when the run is due (epoch ms). */
  runAt?: number;
  /**
   * The run's first event (`queued` or `scheduled`): what its submit's caller was told, e.g.
   * that no live worker of its runtime serves its agent yet, so the run waits for one.
   */
  warnings?: string[];
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

export interface SteeringEventData {
  messageId: string;
  outcome: 'pending' | 'delivered' | 'not-delivered';
  /** `delivered`: the run's boundary it was taken at (createChatAgent: after model call `step`). */
  step?: number;
  /** `delivered`: the message's text. */
  content?: string;
  /** `not-delivered`: the status the run ended with first. */
  reason?: string;
  /** `not-delivered`: the run the message became, queued next in the session. */
  turnRunId?: string;
}

export interface EndEventData { status: TerminalStatus; result: RunResult; error?: RunError }

/** SSE event names a run's stream carries. */
export const RUN_EVENT_TYPES = ['status', 'attempt', 'token', 'ephemeral', 'tool-call', 'tool-result', 'data', 'steering', 'end'] as const;
