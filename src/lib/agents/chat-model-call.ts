import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import type { ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions';
import type { CompletionUsage } from 'openai/resources/completions';
import type { RateLimitRequest, RunContext } from '../sdk/agent.ts';
import { recordModelCall, reportModelCall, type ModelUsage } from '../sdk/agent-reports.ts';
import { TransientError } from '../sdk/errors.ts';
import { estimateCallTokens } from '../sdk/token-estimate.ts';

/**
 * One model call of a chat agent: a chat completion streamed from an OpenAI-compatible
 * endpoint inside a memoized `ctx.infer` step. The step's stored value is the whole response
 * (text, tool calls, finish reason, usage), so a retry or a recovery gets it back without
 * paying for it again, and the text it streamed is replayed to readers from the memo.
 */
export interface ModelTurn {
  /** The model's text (what it streamed through ctx.emit, without the separator before it). */
  text: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  /** As the provider said it: `stop`, `length`, `tool_calls`, `content_filter`, ... */
  finishReason: string;
  usage?: ModelUsage;
}

export type TurnRequest = Omit<ChatCompletionCreateParamsStreaming, 'stream' | 'stream_options'>;

export interface TurnOptions {
  /** The step is `infer:<stepName>:<n>`, n counting the run's calls in order: the Nth call of any attempt has the same key. */
  stepName: string;
  /** 1 for the run's first model call; names tool calls a server sent without an id. */
  turn: number;
  /**
   * Emitted before the turn's first text when an earlier turn of the run already said
   * something, so readers see the same text the answer holds.
   */
  separator: string;
  /** The provider rate-limit bucket the call takes a grant from first (its reservation: the budget's estimate). */
  rateLimit?: RateLimitRequest;
}

export async function modelTurn(ctx: RunContext, client: OpenAI, request: TurnRequest, o: TurnOptions): Promise<ModelTurn> {
  let called = false;
  // What the scope's daily token budget checks before the call: the messages and tools sent, and the most it may answer.
  const { model: _model, ...prompt } = request;
  const estimatedTokens = estimateCallTokens(prompt, request.max_completion_tokens ?? request.max_tokens);
  const stored = await ctx.infer(o.stepName, async (call): Promise<ModelTurn> => {
    called = true;
    let turn: ModelTurn;
    try {
      turn = await streamTurn(ctx, client, request, o, call.signal);
    } catch (err) {
      const notice = providerError(err);
      if (!(notice instanceof APIUserAbortError)) ctx.emit(`[model error: ${errorCode(notice)}]`, { ephemeral: true });
      throw notice;
    }
    // Counted with the stored turn: once, whatever happens to this attempt afterwards.
    // `openai`: the client speaks OpenAI's API, whoever serves it (OpenTelemetry names providers so).
    recordModelCall(call, request.model, turn.usage, 'openai');
    return turn;
  }, { estimatedTokens, rateLimit: o.rateLimit });
  // Memos written before tool calls existed hold { text, finishReason } only.
  const turn: ModelTurn = { text: stored.text ?? '', toolCalls: stored.toolCalls ?? [], finishReason: stored.finishReason, usage: stored.usage };
  reportModelCall(ctx, { model: request.model, usage: turn.usage, replayed: !called });
  return turn;
}

async function streamTurn(ctx: RunContext, client: OpenAI, request: TurnRequest, o: TurnOptions, signal: AbortSignal): Promise<ModelTurn> {
  // include_usage: the provider's count arrives in a last chunk with no choices.
  const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }, { signal });
  let text = '';
  const calls: ModelTurn['toolCalls'] = [];
  let finishReason: string | null = null;
  let usage: ModelUsage | undefined;
  try {
    for await (const chunk of stream) {
      if (chunk.usage) usage = toUsage(chunk.usage);
      const choice = chunk.choices[0];
      const delta = choice?.delta;
      if (delta?.content) {
        if (!text && o.separator) ctx.emit(o.separator);
        text += delta.content;
        ctx.emit(delta.content);
      }
      // A call's first chunk carries its id and name; later ones append to its arguments.
      for (const d of delta?.tool_calls ?? []) {
        const call = (calls[d.index] ??= { id: '', name: '', arguments: '' });
        if (d.id && !call.id) call.id = d.id;
        if (d.function?.name && !call.name) call.name = d.function.name;
        if (d.function?.arguments) call.arguments += d.function.arguments;
      }
      if (choice?.finish_reason) finishReason = choice.finish_reason;
    }
  } catch (err) {
    if (signal.aborted || err instanceof APIUserAbortError) throw err;
    throw new TransientError(`the model stream broke after ${text.length} characters: ${(err as Error).message}`, 'STREAM_CUT', { cause: err });
  }
  // A stream that ends without a finish reason was cut, even when the connection closed cleanly.
  if (!finishReason) throw new TransientError(`the model stream ended unfinished after ${text.length} characters`, 'STREAM_CUT');
  // Indexes may skip (a server numbering calls its own way); a server that sends no id gets
  // one made up here, unique in the run and stable because the turn is stored with it.
  const toolCalls = calls.filter(Boolean).map((c, i) => ({ ...c, id: c.id || `call-${o.turn}-${i + 1}` }));
  return { text, toolCalls, finishReason, usage };
}

function toUsage(u: CompletionUsage): ModelUsage {
  return {
    inputTokens: u.prompt_tokens,
    outputTokens: u.completion_tokens,
    totalTokens: u.total_tokens ?? u.prompt_tokens + u.completion_tokens,
  };
}

/**
 * Provider errors in Baton's terms. HTTP errors keep their `status` and `headers`, which the
 * retry policy classifies (408/425/429/5xx transient, reading Retry-After; others
 * permanent); connection failures and timeouts, which carry no status, become TransientError.
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
