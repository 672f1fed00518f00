import type { ChatCompletion, ChatCompletionChunk, ChatCompletionMessageFunctionToolCall } from 'openai/resources/chat/completions';
import type { EndEventData, TextEventData } from '../contract/events.ts';
import type { RunEvent } from '../streams/log.ts';
import { functionCalls } from './response-events.ts';

/**
 * A run's event log as an OpenAI chat completion
 * (https://platform.openai.com/docs/api-reference/chat-streaming): the chunks of a stream,
 * and the completion they add up to, folded from Baton's events in log order.
 *
 * | Baton event                          | chunk                                                          |
 * |--------------------------------------|----------------------------------------------------------------|
 * | the first `token`                    | `delta: { role: 'assistant', content: '' }`, then its text     |
 * | `token`                              | `delta: { content }`                                           |
 * | `attempt` after text of a lost one   | nothing; the next text starts with a blank line                |
 * | `end` succeeded                      | `delta: {}` with finish_reason `stop` (or `length`), then usage |
 * | `end` with the client's tool calls   | per call `delta.tool_calls` (index, id, name; then arguments); finish_reason `tool_calls` |
 * | `end` failed, cancelled or expired   | `{ error }` (the SDKs raise it), then usage                    |
 *
 * A chat completion has no way to take text back, so a lost attempt's text stays in the
 * message and the next attempt's answer follows it after a blank line: the message is
 * exactly what was streamed (invariant 19), in the stream and in a completion not streamed.
 */
export interface CompletionHead {
  id: string;
  /** Epoch seconds. */
  created: number;
  model: string;
}

export type ChatCompletionFrame = ChatCompletionChunk | { error: { message: string; type: string; param: null; code: string } };

export class ChatCompletionProjection {
  private text = '';
  private started = false;
  /** A lost attempt left text: the next text starts after a blank line. */
  private broken = false;
  private finish: 'stop' | 'length' | 'tool_calls' | undefined;
  private toolCalls: ChatCompletionMessageFunctionToolCall[] = [];
  private failure: { code: string; message: string } | undefined;
  private usage: ChatCompletion['usage'];

  constructor(private readonly head: CompletionHead, private readonly includeUsage = false) {}

  apply(events: readonly RunEvent[]): ChatCompletionFrame[] {
    const out: ChatCompletionFrame[] = [];
    for (const e of events) {
      if (e.type === 'token') {
        const data = parse<TextEventData>(e);
        if (data.role === 'assistant' && data.text) this.addText(data.text, out);
      } else if (e.type === 'attempt') {
        if (this.text) this.broken = true;
      } else if (e.type === 'end') {
        this.end(parse<EndEventData>(e), out);
      }
    }
    return out;
  }

  /** The completion as the events make it; a run that did not succeed has `failure` instead. */
  completion(): { completion: ChatCompletion; failure?: { code: string; message: string } } {
    const completion: ChatCompletion = {
      id: this.head.id, object: 'chat.completion', created: this.head.created, model: this.head.model,
      choices: [{ index: 0, message: this.message(), finish_reason: this.finish ?? 'stop', logprobs: null }],
      ...(this.usage ? { usage: this.usage } : {}),
    };
    return { completion, ...(this.failure ? { failure: this.failure } : {}) };
  }

  /** As OpenAI answers: a message that only calls tools has content null. */
  private message(): ChatCompletion.Choice['message'] {
    if (this.toolCalls.length === 0) return { role: 'assistant', content: this.text, refusal: null };
    return { role: 'assistant', content: this.text || null, refusal: null, tool_calls: this.toolCalls };
  }

  private chunk(delta: ChatCompletionChunk.Choice.Delta, finish: ChatCompletionChunk.Choice['finish_reason'] = null): ChatCompletionChunk {
    return {
      id: this.head.id, object: 'chat.completion.chunk', created: this.head.created, model: this.head.model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    };
  }

  private addText(text: string, out: ChatCompletionFrame[]): void {
    if (!this.started) {
      this.started = true;
      out.push(this.chunk({ role: 'assistant', content: '' }));
    }
    const delta = this.broken ? `\n\n${text}` : text;
    this.broken = false;
    this.text += delta;
    out.push(this.chunk({ content: delta }));
  }

  private end(data: EndEventData, out: ChatCompletionFrame[]): void {
    const u = data.result?.usage;
    if (u) this.usage = { prompt_tokens: u.inputTokens, completion_tokens: u.outputTokens, total_tokens: u.totalTokens };
    if (data.status === 'succeeded') {
      this.toolCalls = functionCalls(data).map((c) => ({ id: c.callId, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      this.finish = this.toolCalls.length ? 'tool_calls' : data.result.finishReason === 'length' ? 'length' : 'stop';
      if (!this.started) out.push(this.chunk({ role: 'assistant', content: this.toolCalls.length ? null : '' }));
      // The run ends with each call whole: its id and name, then its arguments in one piece.
      this.toolCalls.forEach((c, index) => {
        out.push(this.chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] }));
        out.push(this.chunk({ tool_calls: [{ index, function: { arguments: c.function.arguments } }] }));
      });
      out.push(this.chunk({}, this.finish));
    } else {
      this.failure = data.error
        ? { code: data.error.code, message: data.error.message }
        : { code: data.status.toUpperCase(), message: `the run ended ${data.status}` };
      out.push({ error: { message: `${this.failure.code}: ${this.failure.message}`, type: 'server_error', param: null, code: this.failure.code.toLowerCase() } });
    }
    // stream_options.include_usage: a last chunk with no choices and the usage of the whole request.
    if (this.includeUsage) {
      out.push({ ...this.chunk({}), choices: [], usage: this.usage ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } });
    }
  }
}

function parse<T>(e: RunEvent): T {
  return JSON.parse(typeof e.data === 'string' ? e.data : e.data.toString('utf8')) as T;
}
