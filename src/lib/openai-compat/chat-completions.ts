import type { ChatCompletion } from 'openai/resources/chat/completions';
import { BatonError } from '../errors.ts';
import { newRunId } from '../ids.ts';
import type { RunRecord } from '../engine/record.ts';
import type { Submission, Submissions, SubmitOptions } from '../engine/submissions.ts';
import type { RunStreams } from '../streams/run-streams.ts';
import { ChatCompletionProjection, type CompletionHead } from './chat-completion-events.ts';
import { followToEnd } from '../streams/follow-to-end.ts';

/**
 * OpenAI's Chat Completions on Baton's runs. A request carries its whole conversation, so
 * each is a run in a session of its own: its last message (a user's) is the run's input,
 * its system and developer messages the agent's system message, the turns before the last
 * the built-in chat agent's `metadata.messages`, sent to the model before it.
 */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  metadata?: Record<string, string> | null;
  store?: boolean | null;
  n?: number | null;
}

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant';
  content: string | { type: 'text'; text: string }[];
  name?: string;
}

const textOf = (m: ChatMessage) => (typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join(''));

export const completionIdOf = (runId: string) => `chatcmpl-${runId}`;

export class OpenAiChatCompletions {
  constructor(private readonly d: { submissions: Submissions; streams: RunStreams; models: Record<string, string>; runtime: string }) {}

  async create<A>(scope: string, req: ChatRequest, o: SubmitOptions<A>): Promise<Submission<A> & { head: CompletionHead }> {
    const last = req.messages.at(-1);
    if (last?.role !== 'user') {
      throw new BatonError('VALIDATION_FAILED', undefined, [{ path: `body.messages.${req.messages.length - 1}.role`, message: 'the last message must be a user message' }]);
    }
    const system = req.messages.filter((m) => m.role === 'system' || m.role === 'developer').map(textOf).filter(Boolean).join('\n\n');
    const earlier = req.messages.slice(0, -1).filter((m) => m.role === 'user' || m.role === 'assistant').map((m) => ({ role: m.role, content: textOf(m) }));
    const maxTokens = req.max_completion_tokens ?? req.max_tokens;
    const made = await this.d.submissions.submit({
      scope, sessionId: `oai-${newRunId()}`, runtime: this.d.runtime, agent: this.d.models[req.model] ?? req.model,
      input: { content: textOf(last) },
      metadata: {
        ...req.metadata, openai: { model: req.model },
        ...(system ? { system } : {}), ...(earlier.length ? { messages: earlier } : {}), ...(maxTokens ? { maxTokens } : {}),
      },
    }, o);
    return { ...made, head: headOf(made.run, req.model) };
  }

  /** The completion once its run ended; a run that failed, was cancelled or expired is a 500 saying why. */
  async settled(scope: string, run: RunRecord, head: CompletionHead, o: { fresh: boolean; signal: AbortSignal }): Promise<ChatCompletion> {
    const projection = new ChatCompletionProjection(head);
    await followToEnd(this.d.streams, scope, run.id, o, (events) => void projection.apply(events));
    const { completion, failure } = projection.completion();
    if (failure) throw new BatonError('INTERNAL', `The run ${run.id} ended without an answer: ${failure.code}: ${failure.message}`);
    return completion;
  }
}

function headOf(run: RunRecord, model: string): CompletionHead {
  return { id: completionIdOf(run.id), created: Math.floor(run.createdAt / 1000), model };
}
