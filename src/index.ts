/**
 * The `baton` package: the agent SDK (what a worker's agent modules import), the errors
 * that steer retries, and the typed HTTP client (what an application that submits runs
 * imports). Servers are started with the `baton` command, not from here.
 */
export { defineAgent } from './lib/sdk/agent.ts';
export type {
  Agent, AgentResult, EmitOptions, HistoryMessage, RunContext, StepCall, StepOptions,
} from './lib/sdk/agent.ts';
export { OutputInvalidError, PermanentError, RetryAfterError, TransientError } from './lib/sdk/errors.ts';
export { redisMemory } from './lib/sessions/memory-session.ts';
export type {
  AssembleRequest, BuiltinMemory, MemoryFactory, MemoryOption, MemorySession, SessionRef, SlidingWindowOptions,
} from './lib/sessions/memory-session.ts';
export { slidingWindow, withSlidingWindow } from './lib/sessions/sliding-window.ts';
export { createChatAgent, defineTool, DEFAULT_MAX_STEPS } from './lib/agents/chat.ts';
export type { ChatAgentOptions, ChatTool, JsonSchema, ToolCallContext } from './lib/agents/chat.ts';
export type { ModelUsage } from './lib/sdk/agent-reports.ts';
export { BatonApiError, BatonClient, BatonStreamError } from './lib/client/client.ts';
export type {
  BatonClientOptions, MessagesPage, PublicRunStatus, Run, RunError, RunInput, RunResult, RunStreamEvent,
  SessionMessage, StatusEventData, StreamOptions, SubmitRequest, TerminalStatus,
} from './lib/client/client.ts';
