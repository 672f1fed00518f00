import type { Logger } from '../logger.ts';
import type { HistoryMessage, MemoryOption } from '../sessions/memory-session.ts';
import type { AgentInput } from '../artifacts/artifact-store.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';

/** A message the agent sees in ctx.history (the session's assembled history). */
export type { HistoryMessage };

export interface StepOptions {
  /** false: a crash between start and result blocks the run instead of re-running the step. Default true. */
  idempotent?: boolean;
}

export interface StepCall {
  /** `<runId>:<stepKey>`: stable across attempts and recoveries; pass it to providers. */
  idempotencyKey: string;
  signal: AbortSignal;
}

export interface EmitOptions {
  /** Streamed to clients, never part of the answer or the history. */
  ephemeral?: boolean;
}

export interface RunContext {
  readonly runId: string;
  readonly scope: string;
  readonly sessionId: string;
  readonly runtime: string;
  readonly agent: string;
  /** 1 on the first attempt; unchanged by a recovery after a crash. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** The new message; `artifacts` when the submit attached some (bytes for inline ones). */
  readonly input: AgentInput;
  readonly metadata: Record<string, unknown>;
  /** Caller memory from the submit body (never stored in session state); undefined when absent. */
  readonly memory: unknown;
  /** The session's history as the memory store assembled it, without this run's user message. */
  readonly history: readonly HistoryMessage[];
  /**
   * The same memory by origin: `conversation` (ctx.history itself) and `external` (caller
   * memory, recalled turns), built anew for every attempt; see sessions/memory-blocks.ts.
   */
  readonly memoryBlocks: MemoryBlocks;
  /** Aborted on cancel, lease loss or shutdown; `signal.reason` says which. */
  readonly signal: AbortSignal;
  readonly log: Logger;
  /** Streams a token delta; never blocks on Redis. */
  emit(text: string, options?: EmitOptions): void;
  /** A memoized unit of work: its result is stored and returned by later attempts without calling fn. */
  step<T>(key: string, fn: (call: StepCall) => Promise<T> | T, options?: StepOptions): Promise<T>;
  /** A memoized model call (step key `infer:<name>:<n>`); text it emits is replayed on a memo hit. */
  infer<T>(name: string, fn: (call: StepCall) => Promise<T> | T): Promise<T>;
  /** A memoized tool call (step key `tool:<name>:<n>`), counted in result.toolCallsSeen. */
  tool<A, T>(name: string, args: A, fn: (args: A, call: StepCall) => Promise<T> | T, options?: StepOptions): Promise<T>;
}

export interface AgentResult {
  answer: string;
  /** Structured output; validated against the submit's outputSchema when one was given. */
  payload?: unknown;
  /** 'stop' (default) or 'length' when the model truncated: the committed answer is marked incomplete. */
  finishReason?: 'stop' | 'length';
}

export interface Agent {
  name: string;
  /** Default attempts for this agent's runs (a submit may override). */
  maxAttempts?: number;
  /**
   * Where this agent's session history lives. Absent: the built-in Redis store with the
   * whole history. `redisMemory({ window })` windows it; a function opens a custom store
   * per session (see memory-session.ts for the commit contract).
   */
  memory?: MemoryOption;
  run(ctx: RunContext): Promise<AgentResult | string> | AgentResult | string;
}

/** Typed helper: `export default defineAgent({ name: 'triage', async run(ctx) { ... } })`. */
export function defineAgent<A extends Agent>(agent: A): A {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(agent.name)) {
    throw new Error(`agent name ${JSON.stringify(agent.name)} must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}`);
  }
  return agent;
}

export function isAgent(value: unknown): value is Agent {
  return (
    typeof value === 'object' && value !== null &&
    typeof (value as Agent).name === 'string' && typeof (value as Agent).run === 'function'
  );
}
