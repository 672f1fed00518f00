import type { Agent, HistoryMessage, ModelCallUsage } from '../sdk/agent.ts';
import type { McpCallNotice } from '../sdk/agent-reports.ts';
import type { EventWriter } from '../streams/writer.ts';
import type { Logger } from '../logger.ts';
import type { AgentInput } from '../artifacts/artifact-store.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';
import type { Attempt } from '../transitions/attempt.ts';
import type { RunRecord } from '../transitions/record.ts';
import type { AttemptGateway } from '../transitions/attempt-gateway.ts';
import type { SchemaGuard } from './schema/schema-guard.ts';
import type { WaitTokens } from './waits/wait-tokens.ts';
import type { TokenBudgets } from './flow/budgets.ts';
import type { RateLimiter } from './flow/rate-limiter.ts';
import type { AttemptTrace } from '../tracing/tracing.ts';

/** Memo lookups of the run's steps (metrics). */
export interface MemoEvents {
  hit(kind: string): void;
  miss(kind: string): void;
}

/** What a run context is made of (ContextState and its parts read it): fixed for the attempt. */
export interface ContextDeps {
  transitions: AttemptGateway;
  attempt: Attempt;
  run: RunRecord;
  agent: Agent;
  history: HistoryMessage[];
  /** ctx.memoryBlocks: its `conversation` is `history`. */
  memoryBlocks: MemoryBlocks;
  /** ctx.input: the run's input with its artifacts resolved. */
  input: AgentInput;
  /** The steps hash as read at claim: step key -> stored JSON ({v, e?, startedAt?, finishedAt?}) or start markers. */
  steps: Record<string, string>;
  writer: EventWriter;
  log: Logger;
  memo?: MemoEvents;
  /** Steering messages delivered at a boundary reached for the first time (metrics: a replayed boundary is not counted again). */
  steered?(count: number): void;
  /** Model calls of a step whose result this attempt stored: counted now, once (metrics). */
  usageCounted?(agent: string, calls: readonly ModelCallUsage[]): void;
  /** A request to an MCP server an agent helper made (metrics). */
  mcpCalled?(notice: McpCallNotice): void;
  /** Derives the resume tokens of waits; without it waits get none (resumable with a key only). */
  waitTokens?: WaitTokens;
  /** Checks the JSON Schema of a wait before the run waits on it. */
  schemaGuard?: SchemaGuard;
  /** Waits the run may have pending at once (MAX_WAITS_PER_RUN); the one past it fails the run with TOO_MANY_WAITS. */
  maxWaits?: number;
  /** Model providers' rate-limit buckets (RATE_LIMITS), taken before each model call that names one; unset: none defined. */
  rateLimits?: RateLimiter;
  /** The scopes' daily token budgets, checked before each model call made; unset: none checked. */
  budgets?: TokenBudgets;
  /** A model call the scope's budget refused: the run fails, or waits for the next day (metrics). */
  budgetRefused?(action: 'failed' | 'waiting'): void;
  /** The attempt's spans: each step gets one (docs/tracing.md); unset: none. */
  trace?: AttemptTrace;
}
