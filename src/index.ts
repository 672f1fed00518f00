/**
 * The `baton` package: the agent SDK (what a worker's agent modules import), the errors
 * that steer retries, and the typed HTTP client (what an application that submits runs
 * imports). Servers are started with the `baton` command, not from here.
 */
export { defineAgent } from './lib/sdk/agent.ts';
export type {
  Agent, AgentResult, EmitOptions, HistoryMessage, RunContext, StepCall, StepOptions,
} from './lib/sdk/agent.ts';
export { OutputInvalidError, PermanentError, RetryAfterError, TransientError } from './lib/errors.ts';
export { redisMemory } from './lib/sessions/memory-session.ts';
export type {
  AssembleRequest, BuiltinMemory, MemoryFactory, MemoryOption, MemorySession, SessionRef, SlidingWindowOptions,
} from './lib/sessions/memory-session.ts';
export { slidingWindow, withSlidingWindow } from './lib/sessions/sliding-window.ts';
export { openAIEmbeddings, type Embedder, type OpenAIEmbeddingsOptions } from './lib/sessions/embeddings.ts';
export type { RecallOptions } from './lib/sessions/recall-options.ts';
export type { ExternalMemory, MemoryBlocks, RecalledTurn } from './lib/sessions/memory-blocks.ts';
export type { AgentInput, ArtifactRef, ArtifactStore, InputArtifact } from './lib/artifacts/artifact-store.ts';
export type { ArtifactAttachment, ArtifactDisposition } from './lib/engine/record.ts';
export { createChatAgent, type ChatSettings } from './lib/agents/chat.ts';
export { BatonApiError, BatonClient, BatonStreamError } from './lib/client/client.ts';
export type {
  BatonClientOptions, MessagesPage, PublicRunStatus, Run, RunError, RunInput, RunResult, RunStreamEvent,
  SessionMessage, StatusEventData, StreamOptions, SubmitRequest, TerminalStatus,
} from './lib/client/client.ts';
