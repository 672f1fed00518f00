import { readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
import type { RunEvent } from '../lib/streams/log.ts';
import { ChatEncoder } from './chat-stream.ts';
import type { ChatHistory } from '../lib/engine/operations/chat-turns.ts';
import type { SessionMessage } from '../lib/contract/runs.ts';

/** What a chat message's metadata holds: the turn's run, and whether its answer was cut short. */
export interface ChatMessageMetadata { runId: string; createdAt: number; incomplete?: true }

/**
 * A chat's history as the AI SDK's `UIMessage[]` (what `useChat({ messages })` starts from):
 * each committed message one message, with one text part, or, for an answer whose event log is
 * still retained (RETENTION_MS), the parts its stream showed; an assistant message's id is its
 * run's id, the id the chat stream's `start` gave it, so a stream resumed after loading the
 * history replaces that message instead of adding one. The running turn's user message (it is
 * committed with its answer, at the turn's end) comes last, so a page that reloads mid-answer
 * shows the question before the answer it resumes.
 */
export async function chatMessages(history: ChatHistory): Promise<UIMessage<ChatMessageMetadata>[]> {
  const out: UIMessage<ChatMessageMetadata>[] = [];
  for (const m of history.messages) {
    const log = m.role === 'assistant' ? history.logs.get(m.runId) : undefined;
    out.push({ ...toUIMessage(m), ...(log ? { parts: await partsOf(m.runId, log) } : {}) });
  }
  const run = history.running;
  if (run) out.push(toUIMessage({ role: 'user', content: run.input.content, runId: run.id, createdAt: run.createdAt }));
  return out;
}

function toUIMessage(m: SessionMessage): UIMessage<ChatMessageMetadata> {
  return {
    id: m.role === 'assistant' ? m.runId : userMessageId(m.runId),
    role: m.role,
    metadata: { runId: m.runId, createdAt: m.createdAt, ...(m.incomplete ? { incomplete: true as const } : {}) },
    parts: [{ type: 'text', text: m.content, state: 'done' }],
  };
}

/**
 * An answer's parts as its stream built them (text, tool calls and their results, data): the
 * chat stream's chunks of its whole log, assembled by the SDK's own readUIMessageStream, so a
 * page that loads the history sees what it saw live.
 */
async function partsOf(runId: string, log: RunEvent[]): Promise<UIMessage['parts']> {
  const chunks = new ChatEncoder({ messageId: runId, runId }).chunks(log);
  const stream = new ReadableStream<UIMessageChunk>({ start(c) { for (const x of chunks) c.enqueue(x); c.close(); } });
  let message: UIMessage | undefined;
  // A failed turn's stream ends with an error chunk: its parts up to there are the answer.
  for await (const m of readUIMessageStream({ stream, terminateOnError: false, onError: () => {} })) message = m;
  return message?.parts ?? [];
}

/** The id of the user message of a turn: its run's, marked as the question. */
export function userMessageId(runId: string): string {
  return `${runId}-user`;
}
