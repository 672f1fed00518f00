// The memory an agent sees (its `memory` option, ctx.history, ctx.memoryBlocks, recall's
// options): the interfaces only. sessions/ implements them (the Redis store, the window, recall)
// and imports them from here, so the sdk never imports the sessions room.
import type { RunInput, SessionMessage } from '../transitions/record.ts';

/**
 * Where a session's conversation lives, as the runtime sees it.
 *
 * The runtime reads the history once at the start of an attempt and commits one turn (the
 * user message and the answer, together) when the run ends:
 * - reading prefers `assemble(request)` over `load()`: assembly may window, summarize or
 *   retrieve; the runtime appends the new user message itself, so neither returns it;
 * - committing prefers `append(newMessages, { turnId })` over `save(all)`.
 *
 * The built-in Redis store commits inside the run's finish transition, atomically with the
 * run's terminal status, under the run's fence. A custom store is the agent author's code
 * outside Redis, so it commits just before that transition (after a fenced lease check),
 * with `turnId` = the run id. A run whose finish transition is lost (crash, lease taken
 * over) commits again from its next attempt with the same turnId: an `append` that ignores
 * a turnId it has already stored makes the commit exactly once. Messages also carry
 * `runId`; the runtime drops messages of the current run from what it reads, and `save`
 * receives the history with any earlier copy of the turn replaced, so a store without
 * `append` is idempotent as long as it keeps `runId`.
 */
export interface MemorySession {
  /** The whole history, oldest first. */
  load(): Promise<HistoryMessage[]>;
  /** Replaces the whole history (used when the store has no `append`). */
  save(all: HistoryMessage[]): Promise<void>;
  /**
   * The context for a new turn, oldest first, without the new user message. After a crash
   * the store may already hold this run's turn: `request.runId` names it (the runtime drops
   * messages carrying that runId from the result either way).
   */
  assemble?(request: AssembleRequest): Promise<HistoryMessage[]>;
  /** Stores one turn; must be idempotent per `turnId` (see above). */
  append?(newMessages: SessionMessage[], options: { turnId: string }): Promise<void>;
  /**
   * This session is a fork (POST …/sessions/{id}/fork): copy into it the turns the store holds
   * for `from.sessionId` up to and including the one `from.throughRunId` committed. Called on
   * the fork's store before its first turn reads anything, once per agent; called again if that
   * attempt died before the runtime recorded the copy, so a second call must leave the same
   * history as one (replace what the store holds for this session). A store without it copies
   * nothing: the fork starts empty in it (the runtime logs so).
   */
  fork?(from: ForkSource): Promise<void>;
}

/** Where a forked session came from: the source session and the run the fork is at. */
export interface ForkSource {
  sessionId: string;
  throughRunId: string;
}

/** A message of a session's history as agents and stores see it. */
export interface HistoryMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** The run that committed it (absent for messages a custom store made up, e.g. a summary). */
  runId?: string;
  createdAt?: number;
  /** The run ended by error, cancel or truncation after producing this text. */
  incomplete?: boolean;
  /** Tool calls an assistant message made; their results follow as `tool` messages. */
  toolCalls?: { id: string; name: string; arguments: string }[];
  /** On a `tool` message: the call it answers. */
  toolCallId?: string;
}

/** What `assemble` gets: the turn about to run. */
export interface AssembleRequest {
  scope: string;
  sessionId: string;
  runId: string;
  input: RunInput;
  /** Caller memory from the submit (never to be written into the store). */
  memory: unknown;
  metadata: Record<string, unknown>;
}

/** The session a store is opened for. */
export interface SessionRef {
  scope: string;
  sessionId: string;
  runtime: string;
  agent: string;
}

/** A custom store: called once per attempt with the run's session. */
export type MemoryFactory = (session: SessionRef) => MemorySession | Promise<MemorySession>;

/** Keep the newest messages that fit both limits (either may be left out); see sliding-window.ts. */
export interface SlidingWindowOptions {
  /** At most this many messages. */
  maxMessages?: number;
  /** At most this many characters of content (and tool-call arguments). */
  maxChars?: number;
}

/** The built-in Redis store, optionally with the sliding-window assembler and recall. */
export interface BuiltinMemory {
  readonly builtin: 'redis';
  readonly window?: SlidingWindowOptions;
  /** Relevant turns from outside the window, into ctx.memoryBlocks.external.recalledTurns (see recall.ts). */
  readonly recall?: ResolvedRecallOptions;
}

/** What an agent's `memory` option may hold. Absent: the built-in Redis store, whole history. */
export type MemoryOption = MemoryFactory | BuiltinMemory;

/** A past turn of the session that recall found relevant to the new input (see recall.ts). */
export interface RecalledTurn {
  /** The run that committed the turn. */
  runId: string;
  /** Cosine similarity between the new input and the turn, in [-1, 1]. */
  score: number;
  /** The turn's user message, at most `textCap` bytes (then ending in `…[truncated]`). */
  user: string;
  /** The turn's answer, capped the same way. */
  assistant: string;
  createdAt?: number;
  /** The answer was cut short (error, cancel, truncation) when it was committed. */
  incomplete?: boolean;
}

/** Memory that did not come from the session's own conversation window. */
export interface ExternalMemory {
  /** The submit's `memory` (the same value as ctx.memory). Absent when the submit had none. */
  caller?: unknown;
  /** Turns recall found, best first. Absent when the agent's store has no recall; `[]` when it found none. */
  recalledTurns?: RecalledTurn[];
}

/** ctx.memoryBlocks: everything the agent may remember for this turn, by where it came from. */
export interface MemoryBlocks {
  /** What the memory store assembled (the history or its window): the same array as ctx.history. */
  readonly conversation: readonly HistoryMessage[];
  /** Caller memory and recalled turns. Absent when there is neither. */
  readonly external?: ExternalMemory;
}

/**
 * Turns texts into vectors, one per text, in order. Recall compares the vectors of one
 * `id` only: vectors are stored per id (see recall.ts), so changing the model behind an
 * embedder starts a fresh vector space instead of comparing vectors of two models.
 */
export interface Embedder {
  (texts: string[], options?: { signal?: AbortSignal }): Promise<number[][]>;
  /** Names the model (and dimensions) the vectors come from. Absent: one unnamed space. */
  readonly id?: string;
}

/** `redisMemory({ recall })`: relevant past turns of the session, found by embedding similarity. */
export interface RecallOptions {
  /** Texts to vectors; `openAIEmbeddings({ model })` is the provided one. */
  embed: Embedder;
  /**
   * Turns whose cosine similarity to the new input is below this are left out. No default:
   * what counts as related differs from one embedding model to the next.
   */
  minScore: number;
  /** At most this many turns, best first. Default 5: enough to bring back a thread, little enough to stay a side note in a prompt. */
  maxTurns?: number;
  /**
   * Each recalled turn's user and assistant text is cut to this many bytes of UTF-8 (then
   * `…[truncated]` is appended). Default 2048: a recalled turn is a reminder, not a
   * transcript, and one long answer must not crowd the window out of the prompt.
   */
  textCap?: number;
}

export type ResolvedRecallOptions = Required<RecallOptions>;
