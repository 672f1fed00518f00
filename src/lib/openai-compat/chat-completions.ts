import type { ChatCompletion } from 'openai/resources/chat/completions';
import { BatonError } from '../errors.ts';
import { newRunId } from '../ids.ts';
import type { RunRecord } from '../transitions/record.ts';
import type { Submission, Submissions, SubmitOptions } from '../engine/submissions.ts';
import type { RunStreams } from '../streams/run-streams.ts';
import type { FunctionCall } from './responses.ts';
import { ChatCompletionProjection, type CompletionHead } from './chat-completion-events.ts';
import { followToEnd } from '../streams/follow-to-end.ts';

/**
 * OpenAI's Chat Completions on Baton's runs. A request carries its whole conversation, so
 * each is a run in a session of its own: its last user message is the run's input, its
 * system and developer messages the agent's system message, the turns before the input the
 * built-in chat agent's `metadata.messages`, sent to the model before it, and the tool turns
 * after it (the client ran the calls the model asked for) its `metadata.toolTurn`, sent after it.
 */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  tools?: ChatToolRequest[] | null;
  tool_choice?: 'auto' | 'none' | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  metadata?: Record<string, string> | null;
  store?: boolean | null;
  n?: number | null;
}

type Content = string | { type: 'text'; text: string }[];

export type ChatMessage =
  | { role: 'system' | 'developer' | 'user'; content: Content; name?: string }
  | { role: 'assistant'; content?: Content | null; name?: string; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; content: Content; tool_call_id: string };

/** A call an assistant message made of a function tool the client runs. */
export interface ChatToolCall { id: string; type: 'function'; function: { name: string; arguments: string } }

/** A function tool the client runs (Chat Completions nests it under `function`). */
export interface ChatToolRequest {
  type: 'function';
  function: { name: string; description?: string | null; parameters?: Record<string, unknown> | null; strict?: boolean | null };
}

/** A turn of the conversation as the built-in chat agent's `metadata.messages` holds it. */
type CallerTurn =
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls?: FunctionCall[] }
  | { role: 'tool'; callId: string; content: string };

/** A round of tool calls after the input, as the built-in chat agent's `metadata.toolTurn` holds it. */
interface ToolRound { text?: string; calls: FunctionCall[]; outputs: { callId: string; output: string }[] }

const textOf = (content: Content | null | undefined) => (typeof content === 'string' ? content : (content ?? []).map((p) => p.text).join(''));

export const completionIdOf = (runId: string) => `chatcmpl-${runId}`;

export class OpenAiChatCompletions {
  constructor(private readonly d: { submissions: Submissions; streams: RunStreams; models: Record<string, string>; runtime: string }) {}

  async create<A>(scope: string, req: ChatRequest, o: SubmitOptions<A>): Promise<Submission<A> & { head: CompletionHead }> {
    const { input, earlier, rounds } = conversationOf(req.messages);
    const system = req.messages.filter((m) => m.role === 'system' || m.role === 'developer').map((m) => textOf(m.content)).filter(Boolean).join('\n\n');
    // tool_choice none: the model is called without the tools, so it can call none.
    const tools = req.tool_choice !== 'none' && req.tools?.length
      ? req.tools.map(({ function: f }) => ({ name: f.name, description: f.description, parameters: f.parameters }))
      : undefined;
    const maxTokens = req.max_completion_tokens ?? req.max_tokens;
    const made = await this.d.submissions.submit({
      scope, sessionId: `oai-${newRunId()}`, runtime: this.d.runtime, agent: this.d.models[req.model] ?? req.model,
      input: { content: input },
      metadata: {
        ...req.metadata, openai: { model: req.model },
        ...(system ? { system } : {}), ...(earlier.length ? { messages: earlier } : {}), ...(maxTokens ? { maxTokens } : {}),
        ...(tools ? { tools } : {}), ...(rounds.length ? { toolTurn: rounds } : {}),
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

const refuse = (path: string, message: string): never => {
  throw new BatonError('VALIDATION_FAILED', undefined, [{ path: `body.messages${path}`, message }]);
};

/**
 * The run's input (the last user message), the turns before it and the tool rounds after it.
 * Tool calls and tool messages pair up as OpenAI requires: the tool messages right after an
 * assistant message answer each of its calls once, and nothing else; call ids are unique.
 */
function conversationOf(messages: ChatMessage[]): { input: string; earlier: CallerTurn[]; rounds: ToolRound[] } {
  const lastIndex = messages.length - 1;
  const last = messages[lastIndex];
  if (last.role !== 'user' && last.role !== 'tool') refuse(`.${lastIndex}.role`, 'the last message must be a user message or a tool message');
  checkToolPairs(messages);
  const at = messages.map((m) => m.role).lastIndexOf('user');
  if (at < 0) refuse('', 'the conversation needs a user message');
  const earlier = messages.slice(0, at).flatMap(callerTurn);
  const rounds: ToolRound[] = [];
  for (const m of messages.slice(at + 1)) {
    if (m.role === 'assistant') {
      const text = textOf(m.content);
      rounds.push({ ...(text ? { text } : {}), calls: (m.tool_calls ?? []).map(functionCallOf), outputs: [] });
    } else if (m.role === 'tool') {
      rounds.at(-1)!.outputs.push({ callId: m.tool_call_id, output: textOf(m.content) });
    }
  }
  return { input: textOf(messages[at].content), earlier, rounds };
}

function checkToolPairs(messages: ChatMessage[]): void {
  const seen = new Set<string>();
  /** The calls of the assistant message the tool messages now read answer, by id, and where it is. */
  let open: { at: number; unanswered: Map<string, string> } | undefined;
  const closeOpen = () => {
    const [id, name] = open?.unanswered.entries().next().value ?? [];
    if (id !== undefined) refuse(`.${open!.at}.tool_calls`, `no tool message answers the call ${id} (${name}): each call needs one right after this message`);
    open = undefined;
  };
  messages.forEach((m, i) => {
    if (m.role === 'tool') {
      if (!open?.unanswered.delete(m.tool_call_id)) {
        refuse(`.${i}.tool_call_id`, open ? 'no unanswered call of the assistant message before it has this id' : 'a tool message answers a call of the assistant message right before it');
      }
      return;
    }
    closeOpen();
    if (m.role !== 'assistant' || !m.tool_calls) return;
    m.tool_calls.forEach((c, j) => {
      if (seen.has(c.id)) refuse(`.${i}.tool_calls.${j}.id`, 'another tool call of the conversation has this id');
      seen.add(c.id);
    });
    open = { at: i, unanswered: new Map(m.tool_calls.map((c) => [c.id, c.function.name])) };
  });
  closeOpen();
}

const functionCallOf = (c: ChatToolCall): FunctionCall => ({ callId: c.id, name: c.function.name, arguments: c.function.arguments });

function callerTurn(m: ChatMessage): CallerTurn[] {
  switch (m.role) {
    case 'user': return [{ role: 'user', content: textOf(m.content) }];
    case 'assistant': return [{ role: 'assistant', content: textOf(m.content), ...(m.tool_calls ? { toolCalls: m.tool_calls.map(functionCallOf) } : {}) }];
    case 'tool': return [{ role: 'tool', callId: m.tool_call_id, content: textOf(m.content) }];
    default: return [];
  }
}
