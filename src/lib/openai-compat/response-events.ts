import type {
  FunctionTool, Response, ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText, ResponseStatus, ResponseStreamEvent,
  ResponseUsage,
} from 'openai/resources/responses/responses';
import type { EndEventData, StatusEventData, TextEventData } from '../contract/events.ts';
import type { RunResult } from '../contract/runs.ts';
import type { RunEvent } from '../streams/log.ts';

/**
 * A run's event log as an OpenAI response: the Responses API's stream events
 * (https://platform.openai.com/docs/api-reference/responses-streaming) and the response
 * object they build, folded from Baton's events in log order. The same fold serves a POST's
 * stream, a GET's replay with `starting_after` and a GET's object, so all three agree: a
 * sequence number names the same event however often the log is read.
 *
 * | Baton event                              | OpenAI events                                                   |
 * |------------------------------------------|-----------------------------------------------------------------|
 * | the first one (`status` queued)          | response.created (status `queued`)                              |
 * | `status` running, the first time         | response.in_progress                                            |
 * | `token` of the first text of an item     | response.output_item.added, response.content_part.added, delta  |
 * | `token`                                  | response.output_text.delta                                      |
 * | `attempt` after text of a lost attempt   | the item closed `incomplete` (text.done, content_part.done, output_item.done) |
 * | `end`                                    | the open item closed, then response.completed / .incomplete / .failed |
 * | `end` with calls of the client's tools   | before that, a function_call item per call (added, arguments delta and done, done) |
 * | `ephemeral`, `tool-call`, `tool-result`, other `status` | nothing (not part of the answer)                 |
 *
 * A lost attempt's text was sent to the reader and is never taken back: its item ends
 * `incomplete` and the next attempt's text is a new item after it, so each item's deltas
 * add up to that item's text (invariant 19). A cancelled run ends with response.incomplete
 * whose response has status `cancelled` (the Responses API has no cancelled event).
 */

/** What a response shows besides its events: the request it came from, as the run keeps it. */
export interface ResponseHead {
  id: string;
  /** Epoch seconds. */
  createdAt: number;
  model: string;
  instructions: string | null;
  metadata: Record<string, string>;
  background: boolean;
  previousResponseId: string | null;
  maxOutputTokens: number | null;
  /** Function tools the client runs. */
  tools: { name: string; description?: string | null; parameters?: Record<string, unknown> | null; strict?: boolean | null }[];
}

/** The output item id of the `n`th item (from 0) of response `id`: stable across reads of the log. */
const itemId = (responseId: string, n: number) => `msg_${responseId.replace(/^resp_/, '')}_${n}`;

export class ResponseProjection {
  private seq = -1;
  private status: ResponseStatus = 'queued';
  private created = false;
  private readonly output: (ResponseOutputMessage | ResponseFunctionToolCall)[] = [];
  /** The message item receiving text, and its text so far. */
  private open: { item: ResponseOutputMessage; index: number; text: string } | undefined;
  private usage: ResponseUsage | undefined;
  private error: Response['error'] = null;
  private incomplete: Response['incomplete_details'] = null;
  private completedAt: number | null = null;

  constructor(private readonly head: ResponseHead) {}

  /** Whether the response reached its end (completed, incomplete, failed or cancelled). */
  get ended(): boolean {
    return this.completedAt !== null;
  }

  /** Folds Baton events in, in log order; returns the OpenAI events they make. */
  apply(events: readonly RunEvent[]): ResponseStreamEvent[] {
    const out: ResponseStreamEvent[] = [];
    for (const e of events) this.applyOne(e, out);
    return out;
  }

  /** The response object as the events so far make it. */
  response(): Response {
    const h = this.head;
    const output = this.output.map((item) => structuredClone(item));
    return {
      id: h.id, object: 'response', created_at: h.createdAt, status: this.status,
      background: h.background, completed_at: this.completedAt, error: this.error, incomplete_details: this.incomplete,
      instructions: h.instructions, max_output_tokens: h.maxOutputTokens, metadata: h.metadata, model: h.model,
      output, output_text: outputText(output), parallel_tool_calls: false, previous_response_id: h.previousResponseId,
      temperature: null, tool_choice: 'auto', tools: h.tools.map(functionTool), top_p: null, truncation: 'disabled', text: { format: { type: 'text' } },
      ...(this.usage ? { usage: this.usage } : {}),
    };
  }

  private applyOne(e: RunEvent, out: ResponseStreamEvent[]): void {
    if (this.ended) return;
    if (!this.created) {
      this.created = true;
      out.push({ type: 'response.created', sequence_number: ++this.seq, response: this.response() });
    }
    switch (e.type) {
      case 'status': {
        const data = parse<StatusEventData>(e);
        if (data.status === 'running' && this.status === 'queued') {
          this.status = 'in_progress';
          out.push({ type: 'response.in_progress', sequence_number: ++this.seq, response: this.response() });
        }
        return;
      }
      case 'token': {
        const data = parse<TextEventData>(e);
        if (data.role === 'assistant' && data.text) this.addText(data.text, out);
        return;
      }
      case 'attempt':
        // A new attempt answers again from its start: what the lost one said stays as it was sent.
        if (this.open) this.close('incomplete', out);
        return;
      case 'end':
        // Its log id's time (Redis's clock when it was written), so every read of the log agrees.
        return this.end(parse<EndEventData>(e), Math.floor(Number(e.id.split('-')[0]) / 1000), out);
      default:
    }
  }

  private addText(delta: string, out: ResponseStreamEvent[]): void {
    if (this.status === 'queued') {
      this.status = 'in_progress';
      out.push({ type: 'response.in_progress', sequence_number: ++this.seq, response: this.response() });
    }
    if (!this.open) {
      const index = this.output.length;
      const item: ResponseOutputMessage = { id: itemId(this.head.id, index), type: 'message', role: 'assistant', status: 'in_progress', content: [] };
      this.output.push(item);
      this.open = { item, index, text: '' };
      out.push({ type: 'response.output_item.added', sequence_number: ++this.seq, output_index: index, item: structuredClone(item) });
      const part: ResponseOutputText = { type: 'output_text', text: '', annotations: [] };
      item.content.push(part);
      out.push({ type: 'response.content_part.added', sequence_number: ++this.seq, item_id: item.id, output_index: index, content_index: 0, part: { ...part } });
    }
    const open = this.open;
    open.text += delta;
    (open.item.content[0] as ResponseOutputText).text = open.text;
    out.push({
      type: 'response.output_text.delta', sequence_number: ++this.seq, item_id: open.item.id, output_index: open.index,
      content_index: 0, delta, logprobs: [],
    });
  }

  /** A call of a client's function tool: an item of its own, its arguments in one delta. */
  private addCall(call: { callId: string; name: string; arguments: string }, out: ResponseStreamEvent[]): void {
    const index = this.output.length;
    const id = `fc_${this.head.id.replace(/^resp_/, '')}_${index}`;
    const item: ResponseFunctionToolCall = { type: 'function_call', id, call_id: call.callId, name: call.name, arguments: '', status: 'in_progress' };
    out.push({ type: 'response.output_item.added', sequence_number: ++this.seq, output_index: index, item: { ...item } });
    out.push({ type: 'response.function_call_arguments.delta', sequence_number: ++this.seq, item_id: id, output_index: index, delta: call.arguments });
    out.push({
      type: 'response.function_call_arguments.done', sequence_number: ++this.seq, item_id: id, output_index: index, name: call.name, arguments: call.arguments,
    });
    const done: ResponseFunctionToolCall = { ...item, arguments: call.arguments, status: 'completed' };
    this.output.push(done);
    out.push({ type: 'response.output_item.done', sequence_number: ++this.seq, output_index: index, item: { ...done } });
  }

  /** Ends the open item with `status`: its text, its part and the item itself are done. */
  private close(status: ResponseOutputMessage['status'], out: ResponseStreamEvent[]): void {
    const open = this.open!;
    this.open = undefined;
    open.item.status = status;
    const part = open.item.content[0] as ResponseOutputText;
    const at = { item_id: open.item.id, output_index: open.index, content_index: 0 };
    out.push({ type: 'response.output_text.done', sequence_number: ++this.seq, ...at, text: open.text, logprobs: [] });
    out.push({ type: 'response.content_part.done', sequence_number: ++this.seq, ...at, part: { ...part } });
    out.push({ type: 'response.output_item.done', sequence_number: ++this.seq, output_index: open.index, item: structuredClone(open.item) });
  }

  private end(data: EndEventData, at: number, out: ResponseStreamEvent[]): void {
    const finish = data.result?.finishReason;
    const completed = data.status === 'succeeded' && finish === 'stop';
    if (this.open) this.close(completed ? 'completed' : 'incomplete', out);
    for (const call of functionCalls(data)) this.addCall(call, out);
    if (data.result?.usage) this.usage = usageOf(data.result);
    this.completedAt = at;
    if (completed) {
      this.status = 'completed';
      out.push({ type: 'response.completed', sequence_number: ++this.seq, response: this.response() });
    } else if (data.status === 'succeeded' || data.status === 'cancelled') {
      this.status = data.status === 'cancelled' ? 'cancelled' : 'incomplete';
      // 'length': the answer was cut at the token limit, as OpenAI reports max_output_tokens.
      if (data.status === 'succeeded') this.incomplete = { reason: 'max_output_tokens' };
      out.push({ type: 'response.incomplete', sequence_number: ++this.seq, response: this.response() });
    } else {
      this.status = 'failed';
      const why = data.error ? `${data.error.code}: ${data.error.message}` : `the run ended ${data.status}`;
      this.error = { code: 'server_error', message: why };
      out.push({ type: 'response.failed', sequence_number: ++this.seq, response: this.response() });
    }
  }
}

/** The calls of the client's function tools a run ended with (the built-in chat agent's payload). */
export function functionCalls(data: EndEventData): { callId: string; name: string; arguments: string }[] {
  if (data.status !== 'succeeded') return [];
  const calls = (data.result.payload as { functionCalls?: unknown } | undefined)?.functionCalls;
  return Array.isArray(calls) ? calls as { callId: string; name: string; arguments: string }[] : [];
}

function functionTool(t: ResponseHead['tools'][number]): FunctionTool {
  return { type: 'function', name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null };
}

function parse<T>(e: RunEvent): T {
  return JSON.parse(typeof e.data === 'string' ? e.data : e.data.toString('utf8')) as T;
}

/** The text of the output's message items, joined as the SDKs' `output_text` joins it. */
function outputText(output: readonly (ResponseOutputMessage | ResponseFunctionToolCall)[]): string {
  return output.flatMap((m) => (m.type === 'message' ? m.content.map((c) => (c.type === 'output_text' ? c.text : '')) : [])).join('');
}

/** Usage as OpenAI reports it, from what the run's model calls reported (summed over every attempt). */
export function usageOf(result: RunResult): ResponseUsage | undefined {
  const u = result.usage;
  if (!u) return undefined;
  return {
    input_tokens: u.inputTokens, input_tokens_details: { cached_tokens: 0 },
    output_tokens: u.outputTokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: u.totalTokens,
  };
}
