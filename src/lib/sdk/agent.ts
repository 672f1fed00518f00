import type { Logger } from '../logger.ts';
import type { HistoryMessage, MemoryBlocks, MemoryOption } from './memory.ts';
import type { AgentInput } from './agent-input.ts';
import type { AgentEvent, EventPredicate } from './select.ts';

/** A message the agent sees in ctx.history (the session's assembled history). */
export type { HistoryMessage };

export interface StepOptions {
  /** false: a crash between start and result blocks the run instead of re-running the step. Default true. */
  idempotent?: boolean;
}

/** An approval-gated tool call, like any ctx.tool, plus: */
export interface ToolOptions extends StepOptions {
  /**
   * Wait for a person to allow the call before `fn` runs: a wait of kind `approval` whose
   * prompt is the arguments, resumed with `{ approved: true }` or `{ approved: false, reason? }`.
   * A decline throws ToolDeclinedError; an approved call runs once and is memoized as usual.
   */
  approval?: boolean;
}

export interface WaitOptions {
  /** A JSON Schema the resume value must match; the API refuses (400) a value that does not. */
  schema?: Record<string, unknown>;
  /** Give up after this long (from when the wait was first reached): waitFor throws WaitTimeoutError. */
  timeoutMs?: number;
  /** What to show whoever answers (any JSON): a question, a form's context. */
  prompt?: unknown;
}

export interface StepCall {
  /** `<runId>:<stepKey>`: stable across attempts and recoveries; pass it to providers. */
  idempotencyKey: string;
  signal: AbortSignal;
}

/** What an inference's body gets: a step call, and where to record the model calls it made. */
export interface InferCall extends StepCall {
  /**
   * Records one model call's token usage, as the provider reported it, with this step. It is
   * counted (run `result.usage`, the scope's usage by day, metrics) when the step's result is
   * stored, so exactly once per call made: a memo hit in a later attempt adds nothing.
   */
  recordUsage(usage: ModelCallUsage): void;
}

/** How a model call is made (`ctx.infer`'s third argument). */
export interface InferOptions {
  /**
   * Tokens the call is expected to use, input and output: its prompt's size plus its
   * maxTokens when it has one (`estimateCallTokens`). A scope's daily token budget refuses the
   * call before it is made when the tokens used today plus this would pass the budget; without
   * it, only once the budget is used up. createChatAgent and baton/ai give it themselves.
   */
  estimatedTokens?: number;
  /**
   * Take a grant from a model provider's rate-limit bucket (RATE_LIMITS) before the call:
   * the step waits until the bucket can take it (keeping its lease, ending at once when
   * ctx.signal aborts), makes the call, then settles the grant with the usage the call
   * recorded (`call.recordUsage`). A memo hit takes nothing. See docs/rate-limits.md.
   */
  rateLimit?: RateLimitRequest;
}

export interface RateLimitRequest {
  /** The bucket's name, as RATE_LIMITS defines it (`openai:gpt-4o-mini`). */
  key: string;
  /**
   * The tokens to reserve in a bucket that limits tokens a minute: the prompt's size plus the
   * most the answer may take. Default: `estimatedTokens`. The grant is settled with the usage
   * the provider reports, so an estimate too high only holds room a little longer, while the
   * call is made; one too low lets the provider see more than the bucket's tpm in that minute.
   */
  tokens?: number;
  /**
   * true: take a grant only when RATE_LIMITS defines the bucket, and call without one
   * otherwise (how createChatAgent and baton/ai use their default buckets). Default false: a
   * bucket RATE_LIMITS does not define fails the call.
   */
  optional?: boolean;
}

export interface ModelCallUsage {
  /** The model id asked for. */
  model: string;
  inputTokens?: number;
  outputTokens?: number;
  /** Who serves the model (`openai`), as OpenTelemetry's `gen_ai.provider.name` names it: traced only, never counted. */
  provider?: string;
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
  /** The run's agent; in a context from `subagent(name)`, that name. */
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
  /** Aborted on cancel, lease loss, shutdown or a used-up timeoutMs; `signal.reason` says which. */
  readonly signal: AbortSignal;
  readonly log: Logger;
  /** Streams a token delta; never blocks on Redis. */
  emit(text: string, options?: EmitOptions): void;
  /**
   * Streams named JSON data to the run's readers (a chat page gets a `data-<name>` part): never
   * part of the answer or the history, and not replayed by a memo hit. `id`: data of the same
   * name and id replaces the earlier one on a chat page; `transient`: live readers only (a chat
   * page's onData), no part of the message. At most 64 KiB of JSON.
   */
  emitData(name: string, data: unknown, options?: { id?: string; transient?: boolean }): void;
  /** A memoized unit of work: its result is stored and returned by later attempts without calling fn. */
  step<T>(key: string, fn: (call: StepCall) => Promise<T> | T, options?: StepOptions): Promise<T>;
  /**
   * A memoized model call (step key `infer:<name>:<n>`); text it emits (and the agent selects)
   * is replayed on a memo hit. `call.recordUsage` counts the model calls it makes. Before
   * `fn` runs (never on a memo hit), the scope's daily token budget is checked: a call it
   * refuses fails the run with BUDGET_EXCEEDED, or waits for the next UTC day when the
   * submit said `onBudget: "wait"`.
   */
  infer<T>(name: string, fn: (call: InferCall) => Promise<T> | T, options?: InferOptions): Promise<T>;
  /**
   * A memoized tool call (step key `tool:<name>:<n>`), counted in result.toolCallsSeen;
   * `approval` waits for a person first (a declined call does not run and is not counted).
   */
  tool<A, T>(name: string, args: A, fn: (args: A, call: StepCall) => Promise<T> | T, options?: ToolOptions): Promise<T>;
  /**
   * The same run as seen by a sub-agent called `name`: what it emits, its tool calls and its
   * model usage are tagged with that name (so `select` can tell it apart), and its steps are
   * named `<name>.<step>` (step keys stay unique in the run and the same in every attempt).
   */
  subagent(name: string): RunContext;
  /**
   * Waits for a value from outside (a person, a system): key `wait:<name>:<n>`, counted like
   * step keys. The attempt ends without failing once the agent waits on nothing else; the run
   * is `waiting`, holds no worker and no scope slot, and is run again when the wait is resumed
   * (`POST …/runs/{runId}/waits/{key}`, or its token): memoized steps return their results and
   * this call returns the value. Several waits may pend at once (Promise.all). Not inside the
   * body of a step.
   */
  waitFor<T = unknown>(name: string, options?: WaitOptions): Promise<T>;
  /** A durable pause: the run leaves its worker and is run again when it is over (key `wait:sleep:<n>`). */
  sleep(ms: number): Promise<void>;
  /** sleep() until a time (a Date or epoch ms). */
  sleepUntil(when: Date | number): Promise<void>;
  /**
   * Messages sent into this run while it works (a submit with multitask `steer`; docs/steering.md).
   * createChatAgent and baton-agents/ai take them by themselves; a custom agent takes them at
   * its own boundaries (between its model calls).
   */
  readonly steering: Steering;
}

/** A run's steering messages, taken at the agent's boundaries. */
export interface Steering {
  /**
   * The agent is at a boundary: resolves with the messages sent since the last one, in the
   * order sent, each delivered here exactly once (may be none). Boundaries are counted per
   * run like step keys: an attempt that replays the run's steps gets, at each boundary it
   * reaches again, the messages taken there before, and a message sent later waits for a
   * boundary not reached yet. Put them where the model reads them next (user messages of
   * the next model call); the run's history holds them there. One Redis call.
   */
  take(): Promise<SteeringMessage[]>;
}

export interface SteeringMessage {
  /** The message's id (the submit's messageId, or the one Baton gave it). */
  id: string;
  content: string;
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
  /**
   * What the agent does, in a sentence or two: shown to whoever picks it, such as an MCP
   * client listing Baton's agents as tools (docs/mcp.md). At most 1,000 characters.
   */
  description?: string;
  /** Default attempts for this agent's runs (a submit may override). */
  maxAttempts?: number;
  /**
   * Where this agent's session history lives. Absent: the built-in Redis store with the
   * whole history. `redisMemory({ window })` windows it; a function opens a custom store
   * per session (see memory-session.ts for the commit contract).
   */
  memory?: MemoryOption;
  /**
   * Which events reach the run's readers, by agent and role (`agentRole`, `role`, `and`, `or`,
   * `not`). Text left out is neither streamed nor committed to the history; tool calls and
   * results are streamed when selected and never committed. Default: assistant-role text of
   * any agent, with its tool calls and their results.
   */
  select?: EventPredicate;
  /** Sees each event `select` left out (tracing, debugging); what it throws is logged, not raised. */
  onSkip?(event: AgentEvent): void;
  run(ctx: RunContext): Promise<AgentResult | string> | AgentResult | string;
}

/** Typed helper: `export default defineAgent({ name: 'triage', async run(ctx) { ... } })`. */
export function defineAgent<A extends Agent>(agent: A): A {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(agent.name)) {
    throw new Error(`agent name ${JSON.stringify(agent.name)} must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}`);
  }
  if (agent.description !== undefined && (typeof agent.description !== 'string' || agent.description.length > 1_000)) {
    throw new TypeError(`agent ${JSON.stringify(agent.name)}: description must be a string of at most 1,000 characters`);
  }
  for (const hook of ['select', 'onSkip'] as const) {
    if (agent[hook] !== undefined && typeof agent[hook] !== 'function') {
      throw new TypeError(`agent ${JSON.stringify(agent.name)}: ${hook} must be a function`);
    }
  }
  return agent;
}

export function isAgent(value: unknown): value is Agent {
  return (
    typeof value === 'object' && value !== null &&
    typeof (value as Agent).name === 'string' && typeof (value as Agent).run === 'function'
  );
}
