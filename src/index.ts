/**
 * `baton`: the agent SDK, what a worker's agent modules import (defineAgent, the errors that
 * steer retries, memory stores, the built-in chat agent's factory). The HTTP client is
 * `baton/client`; starting or embedding the API and workers from code is `baton/server`.
 */
export { defineAgent } from './lib/sdk/agent.ts';
export type {
  Agent, AgentResult, EmitOptions, HistoryMessage, InferCall, InferOptions, ModelCallUsage, RateLimitRequest, RunContext, StepCall,
  Steering, SteeringMessage, StepOptions, ToolOptions, WaitOptions,
} from './lib/sdk/agent.ts';
// A model call's tokens before it is made: what ctx.infer's estimatedTokens holds against a scope's daily budget.
export { estimateCallTokens } from './lib/sdk/token-estimate.ts';
// What reaches readers and the history, by agent and role: defineAgent({ select, onSkip }).
export { agentRole, and, not, or, role } from './lib/sdk/select.ts';
export type { AgentEvent, EventPredicate } from './lib/sdk/select.ts';
export type { EventRole, TextEventData, ToolCallEventData, ToolResultEventData } from './lib/contract/events.ts';
export {
  OutputInvalidError, PermanentError, RetryAfterError, ToolDeclinedError, TransientError, WaitTimeoutError,
} from './lib/sdk/errors.ts';
export { redisMemory } from './lib/sessions/memory-session.ts';
export type {
  AssembleRequest, BuiltinMemory, ForkSource, MemoryFactory, MemoryOption, MemorySession, SessionRef, SlidingWindowOptions,
} from './lib/sdk/memory.ts';
export { slidingWindow, withSlidingWindow } from './lib/sessions/sliding-window.ts';
export { createChatAgent, defineTool, DEFAULT_MAX_STEPS } from './lib/agents/chat.ts';
export type { ChatAgentOptions, ChatTool, JsonSchema, ToolCallContext } from './lib/agents/chat.ts';
export type { McpApproval, McpHttpServer, McpServerConfig, McpStdioServer } from './lib/sdk/mcp-servers.ts';
export type { ModelUsage } from './lib/sdk/agent-reports.ts';
// The shapes agents see in ctx.input and ctx.history (also part of `baton/client`).
export type { RunError, RunInput, RunResult, SessionMessage, UsageTotals } from './lib/contract/runs.ts';
export { openAIEmbeddings, type OpenAIEmbeddingsOptions } from './lib/sessions/embeddings.ts';
export type { Embedder } from './lib/sdk/memory.ts';
export type { ExternalMemory, MemoryBlocks, RecallOptions, RecalledTurn } from './lib/sdk/memory.ts';
export type { AgentInput, ArtifactRef, InputArtifact } from './lib/sdk/agent-input.ts';
export type { ArtifactStore } from './lib/artifacts/artifact-store.ts';
export type { ArtifactAttachment, ArtifactDisposition } from './lib/transitions/record.ts';
