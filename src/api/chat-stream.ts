import type { UIMessageChunk } from 'ai';
import type {
  DataEventData, EndEventData, StatusEventData, SteeringEventData, TextEventData, ToolCallEventData, ToolResultEventData,
} from '../lib/contract/events.ts';
import { compareIds, type RunEvent } from '../lib/streams/log.ts';
import type { EventEncoder } from './sse.ts';

/**
 * Baton's run events as the AI SDK's UI message stream (package `ai`, `uiMessageChunkSchema`;
 * the wire is what `createUIMessageStreamResponse` writes: SSE `data:` JSON chunks, then
 * `data: [DONE]`), so `useChat` with `DefaultChatTransport` reads a run as an assistant message.
 *
 * | Baton event                               | UI message chunks                                         |
 * |-------------------------------------------|-----------------------------------------------------------|
 * | (stream opens)                            | `start` {messageId, messageMetadata: {runId}}             |
 * | `token`                                   | `start-step` (first in a step), `text-start`, `text-delta` |
 * | `tool-call`                               | `text-end` of open text, `tool-input-available`           |
 * | `tool-result` ok / declined / not ok      | `tool-output-available` / `-denied` / `tool-output-error` |
 * | text or a call after tool results         | `finish-step`, `start-step` (one model call per step)     |
 * | `ephemeral`                               | `data-notice` {text}, transient (never in the message)    |
 * | `data` (ctx.emitData)                     | `data-<name>` {id?, data, transient?}                     |
 * | `status` waiting on an approval           | `tool-approval-request` per call, `finish-step`, `finish` (tool-calls): the response ends |
 * | `attempt` (a later one)                   | nothing at once; see "A later attempt" below              |
 * | `end` succeeded                           | `text-end`, `finish-step`, `finish` {finishReason, messageMetadata: usage} |
 * | `end` cancelled                           | `text-end`, `finish-step`, `abort`                        |
 * | `end` failed                              | `message-metadata`, `error` {errorText: code and message} |
 *
 * Every chunk that closes a Baton event carries that event's id as its SSE `id:`, so a reader
 * resuming with Last-Event-ID gets the rest of the message and nothing twice.
 *
 * A later attempt (a worker died and another took the run over, or a wait was answered) runs
 * the agent again: memoized steps replay what they streamed, and a model call that was lost is
 * made again. What the page was already sent stays true: while the new attempt repeats what
 * the last one said (the same text from the start of the same part, the same tool calls) it
 * sends nothing; where it says more on the part still open, that part grows; where it says
 * something else, the open text part is closed (`text-end`) as it stands and the new
 * attempt's text so far goes out in a new text part with a new id. A part the page holds is
 * never rewritten, and the partial text of a lost attempt is never glued to a different one.
 */

/** Chunks for the wire, and the stream's end marker. */
type Out = (UIMessageChunk | typeof DONE)[];

/** What one attempt said, in order: text parts (their whole text) and tool calls. */
type Item = { kind: 'text'; text: string } | { kind: 'tool'; callId: string } | { kind: 'steering'; messageId: string };

export interface ChatEncoderOptions {
  /** The assistant message the chunks build (`start`'s messageId). */
  messageId: string;
  runId: string;
  /**
   * Events up to this id are what the reader already has (a Last-Event-ID, or what the page
   * holds before an approval's answer): they update the state and send nothing.
   */
  quietThrough?: string;
  /**
   * The reader resumes the same response (Last-Event-ID): no new `start`, and its open text part
   * stays open. Otherwise (a new response after quiet events) it is a new request of the SDK's,
   * whose text parts start closed.
   */
  sameResponse?: boolean;
}

export class ChatEncoder implements EventEncoder {
  private partNo = 0;
  /** The id of the text part the page has open, and the item it shows. */
  private openText: { id: string; item: Item & { kind: 'text' } } | undefined;
  private stepOpen = false;
  /** The last content sent was a tool result: the next text or call is the next model call. */
  private afterResults = false;
  private readonly callsShown = new Set<string>();
  private readonly resultsShown = new Set<string>();
  private readonly approvalsShown = new Set<string>();
  /** Calls of this attempt by name, in order, for matching an approval wait to its call. */
  private calls: ToolCallEventData[] = [];
  /** The previous attempt's items and this one's; `following`: this one repeats that one so far. */
  private prev: Item[] = [];
  private cur: Item[] = [];
  private following = false;
  private quiet: boolean;

  constructor(private readonly o: ChatEncoderOptions) {
    this.quiet = o.quietThrough !== undefined && o.quietThrough !== '0';
  }

  head(): string {
    if (this.o.sameResponse && this.quiet) return '';
    return frame([{ type: 'start', messageId: this.o.messageId, messageMetadata: { runId: this.o.runId } }]);
  }

  encode(events: RunEvent[]): { text: string; done: boolean } {
    let text = '';
    const done = this.each(events, (out, id) => { text += frame(out, id); });
    return { text, done };
  }

  /** The chunks of a run's whole log (a finished turn's message, as its stream showed it). */
  chunks(events: RunEvent[]): UIMessageChunk[] {
    const all: UIMessageChunk[] = [];
    this.each(events, (out) => { for (const c of out) if (c !== DONE) all.push(c); });
    return all;
  }

  /** Each event's chunks the reader does not have yet, in order; true when the response ends. */
  private each(events: RunEvent[], emit: (out: Out, id: string) => void): boolean {
    let done = false;
    for (let i = 0; i < events.length && !done; i++) {
      const e = events[i];
      if (this.quiet && compareIds(e.id, this.o.quietThrough!) > 0) this.wake();
      const out: Out = [];
      done = this.event(e, out, i === events.length - 1);
      if (!this.quiet) emit(out, e.id);
    }
    return done;
  }

  /** The first event the reader does not have: a new response starts with its parts closed. */
  private wake(): void {
    this.quiet = false;
    if (this.o.sameResponse) return;
    this.openText = undefined;
    this.stepOpen = false;
  }

  /** Chunks for one event; true when the response ends with them. */
  private event(e: RunEvent, out: Out, lastOfBatch: boolean): boolean {
    const data = JSON.parse(typeof e.data === 'string' ? e.data : e.data.toString()) as unknown;
    switch (e.type) {
      case 'attempt':
        this.prev = this.cur.length ? this.cur : this.prev;
        this.cur = [];
        this.calls = [];
        this.following = this.prev.length > 0;
        return false;
      case 'token':
        this.text((data as TextEventData).text, out);
        return false;
      case 'tool-call':
        this.toolCall(data as ToolCallEventData, out);
        return false;
      case 'tool-result':
        this.toolResult(data as ToolResultEventData, out);
        return false;
      case 'ephemeral':
        out.push({ type: 'data-notice', data: { text: (data as TextEventData).text }, transient: true });
        return false;
      case 'data': {
        const d = data as DataEventData;
        out.push({ type: `data-${d.name}`, data: d.data, ...(d.dataId ? { id: d.dataId } : {}), ...(d.transient ? { transient: true } : {}) });
        return false;
      }
      case 'steering':
        this.steering(data as SteeringEventData, out);
        return false;
      case 'status':
        return this.status(data as StatusEventData, out, lastOfBatch);
      case 'end':
        this.end(data as EndEventData, out);
        return true;
      default:
        return false;
    }
  }

  private text(delta: string, out: Out): void {
    let item = this.cur.at(-1);
    if (item?.kind !== 'text') this.cur.push((item = { kind: 'text', text: '' }));
    item.text += delta;
    if (this.following) {
      const shown = this.prev[this.cur.length - 1];
      if (shown?.kind === 'text' && shown.text.startsWith(item.text)) return;
      this.following = false;
      // Says more than the part the page has open, from its start: that part grows.
      if (shown?.kind === 'text' && this.openText?.item === shown && item.text.startsWith(shown.text)) {
        this.openText.item = item;
        out.push({ type: 'text-delta', id: this.openText.id, delta: item.text.slice(shown.text.length) });
        return;
      }
      // Something else: what was shown stays as it is, closed; this attempt's text is a new part.
      this.closeText(out);
      this.startText(item, item.text, out);
      return;
    }
    if (this.openText?.item === item) out.push({ type: 'text-delta', id: this.openText.id, delta });
    else this.startText(item, item.text, out);
  }

  private startText(item: Item & { kind: 'text' }, text: string, out: Out): void {
    this.closeText(out);
    this.nextStepIfAfterResults(out);
    this.openStep(out);
    const id = `${this.o.runId}-t${++this.partNo}`;
    this.openText = { id, item };
    out.push({ type: 'text-start', id }, { type: 'text-delta', id, delta: text });
  }

  private toolCall(call: ToolCallEventData, out: Out): void {
    this.cur.push({ kind: 'tool', callId: call.callId });
    this.calls.push(call);
    if (this.following) {
      const shown = this.prev[this.cur.length - 1];
      if (shown?.kind === 'tool' && shown.callId === call.callId) return;
      this.following = false;
    }
    if (this.callsShown.has(call.callId)) return;
    this.callsShown.add(call.callId);
    this.closeText(out);
    this.nextStepIfAfterResults(out);
    this.openStep(out);
    out.push({ type: 'tool-input-available', toolCallId: call.callId, toolName: call.name, input: call.args, dynamic: true });
  }

  private toolResult(r: ToolResultEventData, out: Out): void {
    if (this.resultsShown.has(r.callId)) return;
    this.resultsShown.add(r.callId);
    // A result of a call the page never saw (its event was left out by `select`): the call first.
    if (!this.callsShown.has(r.callId)) this.toolCall({ ...r, args: {} }, out);
    this.closeText(out);
    this.openStep(out);
    out.push(r.ok
      ? { type: 'tool-output-available', toolCallId: r.callId, output: r.result, dynamic: true }
      : r.declined
        ? { type: 'tool-output-denied', toolCallId: r.callId }
        : { type: 'tool-output-error', toolCallId: r.callId, errorText: r.error, dynamic: true });
    this.afterResults = true;
  }

  /**
   * A run waiting for approvals: each is asked for on its call, and the response ends, as the
   * SDK's own approval flow ends it (the page answers with addToolApprovalResponse, which the
   * next POST carries). Only when the wait is the last event read: a replay that reads it with
   * the run's resumption behind it goes on to the answer.
   */
  private status(s: StatusEventData, out: Out, lastOfBatch: boolean): boolean {
    if (s.status !== 'waiting') return false;
    const approvals = (s.waits ?? []).filter((w) => w.kind === 'approval');
    for (const w of approvals) {
      const approvalId = approvalIdOf(this.o.runId, w.key);
      if (this.approvalsShown.has(approvalId)) continue;
      this.approvalsShown.add(approvalId);
      // The call the model asked for; an agent's own ctx.tool reports none, so the wait is the call.
      let call = this.calls.find((c) => (w.name === c.name || w.name.endsWith(`.${c.name}`)) && !this.resultsShown.has(c.callId));
      if (!call) {
        call = { callId: approvalId, name: w.name, args: w.prompt ?? {}, agent: '', role: 'assistant' };
        this.toolCall(call, out);
      }
      this.calls = this.calls.filter((c) => c !== call);
      out.push({ type: 'tool-approval-request', approvalId, toolCallId: call.callId });
    }
    // Never on what the reader has already (quiet): that wait may well have been answered.
    if (!lastOfBatch || this.quiet || approvals.length === 0) return false;
    this.closeText(out);
    this.closeStep(out);
    out.push({ type: 'finish', finishReason: 'tool-calls' });
    out.push(DONE);
    return true;
  }

  private end(end: EndEventData, out: Out): void {
    this.closeText(out);
    this.closeStep(out);
    const metadata = {
      runId: this.o.runId, status: end.status, finishReason: end.result.finishReason,
      ...(end.result.usage ? { usage: end.result.usage } : {}),
      ...(end.status !== 'succeeded' || end.result.finishReason === 'length' ? { incomplete: true } : {}),
    };
    if (end.status === 'succeeded') {
      out.push({ type: 'finish', finishReason: end.result.finishReason === 'length' ? 'length' : 'stop', messageMetadata: metadata });
    } else if (end.status === 'cancelled') {
      out.push({ type: 'message-metadata', messageMetadata: metadata }, { type: 'abort', reason: 'cancelled' });
    } else {
      const error = end.error ? `${end.error.code}: ${end.error.message}` : `the run ended ${end.status}`;
      out.push({ type: 'message-metadata', messageMetadata: metadata }, { type: 'error', errorText: error });
    }
    out.push(DONE);
  }

  /**
   * A steering message the run took: a `data-steering` part ({id, content, step}) where it was
   * taken, between the text before it and the text after. The AI SDK's own `steering-message`
   * part is ai 7's; the chat route speaks ai 6's UI message stream, which has none
   * (docs/steering.md). Pending and not-delivered messages are no part of this answer.
   */
  private steering(d: SteeringEventData, out: Out): void {
    if (d.outcome !== 'delivered') return;
    this.closeText(out);
    this.cur.push({ kind: 'steering', messageId: d.messageId });
    out.push({ type: 'data-steering', id: d.messageId, data: { id: d.messageId, content: d.content ?? '', step: d.step } });
  }

  private closeText(out: Out): void {
    if (!this.openText) return;
    out.push({ type: 'text-end', id: this.openText.id });
    this.openText = undefined;
  }

  private openStep(out: Out): void {
    if (this.stepOpen) return;
    this.stepOpen = true;
    out.push({ type: 'start-step' });
  }

  private closeStep(out: Out): void {
    if (!this.stepOpen) return;
    this.stepOpen = false;
    out.push({ type: 'finish-step' });
  }

  private nextStepIfAfterResults(out: Out): void {
    if (!this.afterResults) return;
    this.afterResults = false;
    this.closeStep(out);
  }
}

/** The end of the stream, as `createUIMessageStreamResponse` writes it (not a chunk of the schema). */
const DONE = '[DONE]' as const;

/** An approval's id in the stream: the run and its wait, which the answering POST resumes. */
export function approvalIdOf(runId: string, waitKey: string): string {
  return `${runId}/${waitKey}`;
}

/** The run and wait an approval id names, or undefined for an id Baton did not make. */
export function parseApprovalId(id: string): { runId: string; waitKey: string } | undefined {
  const m = /^([A-Za-z0-9][A-Za-z0-9._-]{0,63})\/(wait:[A-Za-z0-9][A-Za-z0-9._-]*:[0-9]{1,9})$/.exec(id);
  return m ? { runId: m[1], waitKey: m[2] } : undefined;
}

/** SSE frames for chunks; the last carries the Baton event's id, so a resume starts after the whole event. */
function frame(chunks: (UIMessageChunk | typeof DONE)[], id?: string): string {
  let text = '';
  chunks.forEach((c, i) => {
    if (id !== undefined && i === chunks.length - 1) text += `id: ${id}\n`;
    text += `data: ${c === DONE ? DONE : JSON.stringify(c)}\n\n`;
  });
  return text;
}

/** The headers of the SDK's UI message stream response (`UI_MESSAGE_STREAM_HEADERS` in `ai`). */
export const UI_MESSAGE_STREAM_HEADERS = { 'x-vercel-ai-ui-message-stream': 'v1' } as const;
