import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { defineAgent, type Agent, type HistoryMessage, type RunContext } from '../sdk/agent.ts';
import { loadConfig } from '../config.ts';
import { PermanentError, TransientError } from '../errors.ts';
import { recalledTurnsPrompt } from './recalled-turns.ts';

export interface ChatSettings {
  /** Any OpenAI-compatible endpoint; the OpenAI API when absent. */
  baseURL?: string;
  /** Optional for local servers that need no key (a placeholder is sent then). */
  apiKey?: string;
  model: string;
  /**
   * No answer byte for this long fails the attempt as transient. 60 s: long enough for a
   * slow first token from a large model, short enough that a hung connection is retried
   * well within a lease's lifetime of heartbeats.
   */
  timeoutMs?: number;
}

/**
 * The built-in `chat` agent: the session history plus the new message, sent to an
 * OpenAI-compatible chat completions endpoint, the answer streamed token by token through
 * ctx.emit inside one memoized ctx.infer step (so a recovered run replays a finished answer
 * instead of paying for it twice). Retries are Baton's job, not the SDK's (`maxRetries: 0`):
 * provider errors surface to the retry policy, which retries 408/425/429/5xx (honouring
 * Retry-After), network errors and cut streams, and fails 400/401/404 at once.
 *
 * `metadata.system` (string) becomes a system message; caller memory, when given, is handed
 * to the model as a system message too (it is context, never history).
 */
export function createChatAgent(settings: ChatSettings | (() => ChatSettings)): Agent {
  let cached: { key: string; client: OpenAI } | undefined;
  const clientFor = () => {
    const s = typeof settings === 'function' ? settings() : settings;
    const key = `${s.baseURL}|${s.apiKey}|${s.timeoutMs}`;
    if (cached?.key !== key) {
      if (!s.baseURL && !s.apiKey) {
        throw new PermanentError('the chat agent needs OPENAI_API_KEY or OPENAI_BASE_URL', 'CHAT_NOT_CONFIGURED');
      }
      const client = new OpenAI({
        baseURL: s.baseURL, apiKey: s.apiKey || 'not-needed', maxRetries: 0, timeout: s.timeoutMs ?? 60_000,
      });
      cached = { key, client };
    }
    return { client: cached.client, model: s.model };
  };

  return defineAgent({
    name: 'chat',
    async run(ctx) {
      const { client, model } = clientFor();
      const messages = chatMessages(ctx);
      const out = await ctx.infer('chat', async ({ signal }) => {
        try {
          return await streamAnswer(ctx, client, model, messages, signal);
        } catch (err) {
          const notice = providerError(err);
          if (!(notice instanceof APIUserAbortError)) ctx.emit(`[model error: ${errorCode(notice)}]`, { ephemeral: true });
          throw notice;
        }
      });
      return { answer: out.text, finishReason: out.finishReason === 'length' ? 'length' : 'stop' };
    },
  });
}

async function streamAnswer(
  ctx: RunContext, client: OpenAI, model: string, messages: ChatCompletionMessageParam[], signal: AbortSignal,
): Promise<{ text: string; finishReason: string }> {
  const stream = await client.chat.completions.create({ model, messages, stream: true }, { signal });
  let text = '';
  let finishReason: string | null = null;
  try {
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      const delta = choice?.delta?.content;
      if (delta) {
        text += delta;
        ctx.emit(delta);
      }
      if (choice?.finish_reason) finishReason = choice.finish_reason;
    }
  } catch (err) {
    if (signal.aborted || err instanceof APIUserAbortError) throw err;
    throw new TransientError(`the model stream broke after ${text.length} characters: ${(err as Error).message}`, 'STREAM_CUT', { cause: err });
  }
  // A stream that ends without a finish reason was cut, even when the connection closed cleanly.
  if (!finishReason) throw new TransientError(`the model stream ended unfinished after ${text.length} characters`, 'STREAM_CUT');
  return { text, finishReason };
}

/**
 * Provider errors in Baton's terms. HTTP errors keep their `status` and `headers`, which the
 * retry policy classifies (and reads Retry-After from); connection failures and timeouts,
 * which carry no status, become TransientError.
 */
function providerError(err: unknown): unknown {
  if (err instanceof APIUserAbortError) return err;
  if (err instanceof APIConnectionTimeoutError) return new TransientError('the model did not answer in time', 'TIMEOUT', { cause: err });
  if (err instanceof APIConnectionError) {
    return new TransientError(`the model endpoint is unreachable: ${err.message}`, 'PROVIDER_UNREACHABLE', { cause: err });
  }
  if (err instanceof APIError && err.status === undefined) {
    return new TransientError(`the model stream reported an error: ${err.message}`, 'PROVIDER_STREAM_ERROR', { cause: err });
  }
  return err;
}

function errorCode(err: unknown): string {
  if (err instanceof APIError && typeof err.status === 'number') return `HTTP ${err.status}`;
  return (err as { code?: unknown })?.code ? String((err as { code: unknown }).code) : 'error';
}

function chatMessages(ctx: RunContext): ChatCompletionMessageParam[] {
  const out: ChatCompletionMessageParam[] = [];
  if (typeof ctx.metadata.system === 'string' && ctx.metadata.system) out.push({ role: 'system', content: ctx.metadata.system });
  if (ctx.memory !== undefined) {
    out.push({ role: 'system', content: `Context from the caller (JSON, not part of the conversation): ${JSON.stringify(ctx.memory)}` });
  }
  const recalled = recalledTurnsPrompt(ctx.memoryBlocks);
  if (recalled) out.push({ role: 'system', content: recalled });
  for (const m of ctx.history) out.push(toChatMessage(m));
  out.push({ role: 'user', content: ctx.input.content });
  return out;
}

function toChatMessage(m: HistoryMessage): ChatCompletionMessageParam {
  switch (m.role) {
    case 'system': return { role: 'system', content: m.content };
    case 'user': return { role: 'user', content: m.content };
    case 'tool': return { role: 'tool', content: m.content, tool_call_id: m.toolCallId ?? '' };
    case 'assistant':
      return m.toolCalls?.length
        ? {
          role: 'assistant', content: m.content || null,
          tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
        }
        : { role: 'assistant', content: m.content };
  }
}

/** The built-in instance: settings come from the process's configuration, read when first used. */
let fromEnv: ChatSettings | undefined;
export const chat = createChatAgent(() => {
  if (!fromEnv) {
    const c = loadConfig();
    fromEnv = { baseURL: c.OPENAI_BASE_URL, apiKey: c.OPENAI_API_KEY, model: c.OPENAI_MODEL };
  }
  return fromEnv;
});
