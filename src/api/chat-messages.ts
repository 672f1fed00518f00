import type { UIMessage } from 'ai';
import type { ChatHistory } from '../lib/engine/chat-turns.ts';
import type { SessionMessage } from '../lib/contract/runs.ts';

/** What a chat message's metadata holds: the turn's run, and whether its answer was cut short. */
export interface ChatMessageMetadata { runId: string; createdAt: number; incomplete?: true }

/**
 * A chat's history as the AI SDK's `UIMessage[]` (what `useChat({ messages })` starts from):
 * each committed message one message with one text part; an assistant message's id is its
 * run's id, the id the chat stream's `start` gave it, so a stream resumed after loading the
 * history replaces that message instead of adding one. The running turn's user message (it is
 * committed with its answer, at the turn's end) comes last, so a page that reloads mid-answer
 * shows the question before the answer it resumes.
 */
export function chatMessages(history: ChatHistory): UIMessage<ChatMessageMetadata>[] {
  const out = history.messages.map(toUIMessage);
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

/** The id of the user message of a turn: its run's, marked as the question. */
export function userMessageId(runId: string): string {
  return `${runId}-user`;
}
