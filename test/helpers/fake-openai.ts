import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { track } from './resources.ts';

/**
 * A small OpenAI-compatible server for tests, speaking the wire format the `openai` package
 * and the AI SDK's OpenAI provider (chat completions API) expect:
 *
 * - `POST /v1/chat/completions`: answers the way the real API does, streamed (SSE chunks, a
 *   finish chunk, `[DONE]`) when the request says `stream: true`, one JSON body otherwise.
 *   An answer may carry text, tool calls (streamed as `delta.tool_calls` chunks, several
 *   calls in one response, each call's arguments split over several chunks) and usage (the
 *   last chunk of a stream when the request set `stream_options.include_usage`; always on a
 *   JSON body). On request it answers 429 with Retry-After, 500, 400, or cuts the stream
 *   mid-answer by destroying the socket, or holds a stream halfway until the test lets it go on
 *   (`gate`); `overload()` makes it answer 429 to every request for a while, as a provider over
 *   its limit does.
 * - `POST /v1/embeddings`: a deterministic vector per input (see `fakeEmbedding`), float
 *   arrays or base64 as `encoding_format` asks, unless a test pinned one with `embedding()`.
 *
 * Replies are scripted per test by a marker in the request's last user message, so tests in
 * one file share a server without seeing each other's replies; every request is recorded.
 */
export type FakeReply =
  /**
   * An answer: `tokens` are the text deltas, `toolCalls` follow them. Streamed or one JSON
   * body, as the request asks. `finish` defaults to `tool_calls` when there are tool calls,
   * else `stop`; `length` models a truncation by the model.
   */
  | {
    kind: 'stream'; tokens: string[]; toolCalls?: FakeToolCall[];
    finish?: 'stop' | 'length' | 'tool_calls'; usage?: FakeUsage; delayMs?: number; gate?: FakeGate;
  }
  /** Streams `tokens`, then drops the connection without a finish chunk (a JSON request gets no answer at all). */
  | { kind: 'cut'; tokens: string[]; delayMs?: number }
  | { kind: 'status'; status: number; retryAfter?: string; message?: string };

export interface FakeToolCall {
  /** Default `call_<n>`, numbered across the server, so ids never repeat within a test file. */
  id?: string;
  name: string;
  /** An object is JSON-encoded; a string is sent as is (so a test can send malformed JSON). */
  arguments: unknown;
  /** How many chunks a stream splits the arguments into; default 3. */
  chunks?: number;
}

export interface FakeUsage { prompt_tokens: number; completion_tokens: number }

/**
 * A stream that stops after its first `after` tokens until `open` settles, so "mid-answer" is
 * a moment the test chooses rather than a guess at timing.
 */
export interface FakeGate { after: number; open: Promise<unknown> }

/** A chat message as the server received it (content may be null or parts, as clients send it). */
export interface FakeMessage {
  role: string;
  content: any;
  tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface RecordedRequest {
  model: string;
  stream: boolean;
  messages: FakeMessage[];
  /** The whole request body (tools, tool_choice, stream_options, ...). */
  body: Record<string, any>;
  /** The reply the server chose. */
  reply: FakeReply;
  /** The request's Authorization header (the API key a client sent, as `Bearer <key>`). */
  authorization?: string;
  /** The usage the server reported for this request (undefined when it reported none). */
  usage?: FakeUsage & { total_tokens: number };
  /** When the request arrived (this process's clock, epoch ms), before its body was read. */
  at: number;
  /** Text tokens written to the stream so far (the client gone, none are written any more). */
  tokensSent: number;
  /**
   * How the answer ended: `answered` (written whole), `cut` (dropped by the server, as the reply
   * said) or `client-gone` (the client hung up first); unset while it is being written.
   */
  ended?: 'answered' | 'cut' | 'client-gone';
}

export interface EmbeddingRequest {
  model: string;
  input: string[];
  dimensions: number;
  encoding: 'float' | 'base64';
}

export interface FakeOpenAI {
  /** Base URL for the `openai` client and `createOpenAI` (ends in /v1). */
  baseURL: string;
  requests: RecordedRequest[];
  /**
   * Replies, in order, for requests whose last user message contains `marker` (the longest
   * matching marker wins); once they are used up the last one repeats. Scripting a marker again
   * replaces its earlier replies. A tool loop keeps
   * its last user message, so one script plays the whole loop: model → tools → model → answer.
   * Requests no script matches get `echo: <content>`.
   */
  script(marker: string, replies: FakeReply[]): void;
  /** Requests whose last user message contains `marker`, in arrival order. */
  requestsFor(marker: string): RecordedRequest[];
  /** Every `/embeddings` request, in arrival order. */
  embeddingRequests: EmbeddingRequest[];
  /**
   * Pins the vector `/embeddings` returns for `text` (so a test can make two texts similar);
   * its length wins over the request's `dimensions`. Unpinned texts get `fakeEmbedding`.
   */
  embedding(text: string, vector: number[]): void;
  /**
   * The provider is over its limit, as a real one answers then: the next chat request gets 429
   * with `Retry-After: <seconds>`, and so does every chat request arriving until that time
   * has passed (with the seconds left, rounded up). Other requests are answered as usual.
   */
  overload(retryAfterSeconds: number): void;
  close(): Promise<void>;
}

/** An answer made of words (`'It is sunny.'` → `['It', ' is', ' sunny.']`), with options. */
export function answer(text: string, extra: Omit<Extract<FakeReply, { kind: 'stream' }>, 'kind' | 'tokens'> = {}): FakeReply {
  return { kind: 'stream', tokens: text.match(/\s*\S+/g) ?? [], ...extra };
}

/** A response that asks for tool calls (and says nothing, as models usually do then). */
export function callTools(calls: FakeToolCall[], extra: Omit<Extract<FakeReply, { kind: 'stream' }>, 'kind' | 'tokens' | 'toolCalls'> = {}): FakeReply {
  return { kind: 'stream', tokens: [], toolCalls: calls, ...extra };
}

/**
 * What Baton should count for these requests (a run's `result.usage`, the scope's usage):
 * the sum of the usage the server reported, one model call per request.
 */
export function reportedUsage(
  requests: RecordedRequest[],
): { inputTokens: number; outputTokens: number; totalTokens: number; modelCalls: number } {
  const sum = { inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: requests.length };
  for (const r of requests) {
    if (!r.usage) throw new Error('a request the server reported no usage for: was usage enabled?');
    sum.inputTokens += r.usage.prompt_tokens;
    sum.outputTokens += r.usage.completion_tokens;
    sum.totalTokens += r.usage.total_tokens;
  }
  return sum;
}

/** Default embedding size: small enough to read in a failure message, large enough to tell texts apart. */
export const FAKE_EMBEDDING_DIMENSIONS = 8;

/**
 * The vector the fake server returns for `text` unless pinned: derived from SHA-256 of the
 * text (so equal texts get equal vectors in any process), components in [-1, 1], scaled to
 * unit length (so cosine similarity is a dot product). Unrelated texts are not similar in
 * any meaningful way; pin vectors with `fake.embedding()` where a test needs that.
 */
export function fakeEmbedding(text: string, dimensions = FAKE_EMBEDDING_DIMENSIONS): number[] {
  const raw: number[] = [];
  for (let block = 0; raw.length < dimensions; block++) {
    const digest = createHash('sha256').update(`${block}:${text}`).digest();
    for (let i = 0; i + 1 < digest.length && raw.length < dimensions; i += 2) {
      raw.push(digest.readUInt16BE(i) / 32767.5 - 1);
    }
  }
  const norm = Math.hypot(...raw) || 1;
  return raw.map((x) => x / norm);
}

/**
 * Usage the server reports when a reply names none: 10 tokens per request message, one per
 * text token, 10 per tool call. Deterministic, so a test can predict totals; the recorded
 * request carries what was reported either way.
 */
function defaultUsage(messages: FakeMessage[], reply: Extract<FakeReply, { kind: 'stream' }>): FakeUsage {
  return { prompt_tokens: 10 * messages.length, completion_tokens: reply.tokens.length + 10 * (reply.toolCalls?.length ?? 0) };
}

/** Splits `s` into `n` pieces of near-equal length (fewer when `s` is shorter). */
function split(s: string, n: number): string[] {
  const size = Math.max(1, Math.ceil(s.length / Math.max(1, n)));
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out.length ? out : [''];
}

const textOf = (content: unknown): string => {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p.text === 'string' ? p.text : '')).join('');
  return '';
};

export async function startFakeOpenAI(): Promise<FakeOpenAI> {
  const scripts: { marker: string; replies: FakeReply[]; used: number }[] = [];
  const requests: RecordedRequest[] = [];
  const embeddingRequests: EmbeddingRequest[] = [];
  const pinned = new Map<string, number[]>();
  let callIds = 0;
  /** overload(): the seconds the next chat request starts a 429 period for, and when that period ends. */
  let overloadNext: number | undefined;
  let overloadedUntil = 0;
  const lastUser = (msgs: FakeMessage[]) => textOf([...msgs].reverse().find((m) => m.role === 'user')?.content);

  const choose = (content: string): FakeReply => {
    // The longest matching marker wins, so `#cut` and `#cut-twice` can live side by side.
    const s = scripts.filter((x) => content.includes(x.marker)).sort((a, b) => b.marker.length - a.marker.length)[0];
    if (!s) return answer(`echo: ${content}`);
    return s.replies[Math.min(s.used++, s.replies.length - 1)];
  };

  const server = createServer((req, res) => {
    void handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const at = Date.now();
    let raw = '';
    for await (const chunk of req) raw += chunk;
    if (req.method === 'POST' && req.url?.endsWith('/embeddings')) return embeddings(JSON.parse(raw), res);
    if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'not found' } }));
      return;
    }
    const body = JSON.parse(raw) as RecordedRequest['body'];
    const messages = body.messages as FakeMessage[];
    if (overloadNext !== undefined) {
      overloadedUntil = at + overloadNext * 1000;
      overloadNext = undefined;
    }
    const reply: FakeReply = at < overloadedUntil
      ? { kind: 'status', status: 429, retryAfter: String(Math.ceil((overloadedUntil - at) / 1000)), message: 'rate limit reached' }
      : choose(lastUser(messages));
    const rec: RecordedRequest = {
      model: body.model, stream: body.stream === true, messages, body, reply, authorization: req.headers.authorization, at, tokensSent: 0,
    };
    requests.push(rec);
    res.once('close', () => { rec.ended ??= res.writableFinished ? 'answered' : 'client-gone'; });

    if (reply.kind === 'status') {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (reply.retryAfter !== undefined) headers['retry-after'] = reply.retryAfter;
      res.writeHead(reply.status, headers).end(JSON.stringify({
        error: { message: reply.message ?? `fake provider answered ${reply.status}`, type: 'fake_error', code: null },
      }));
      return;
    }
    const calls = (reply.kind === 'stream' ? reply.toolCalls ?? [] : []).map((c) => ({
      id: c.id ?? `call_${++callIds}`,
      name: c.name,
      arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments),
      chunks: c.chunks ?? 3,
    }));
    const finish = reply.kind === 'stream' ? reply.finish ?? (calls.length ? 'tool_calls' : 'stop') : null;
    const usage = reply.kind === 'stream' ? reply.usage ?? defaultUsage(messages, reply) : undefined;
    const reported = usage && { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens };
    const meta = { id: `chatcmpl-fake-${requests.length}`, created: Math.floor(Date.now() / 1000), model: body.model };

    if (!rec.stream) {
      if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
      if (reply.kind === 'cut') {
        rec.ended = 'cut';
        res.destroy();
        return;
      }
      rec.usage = reported;
      const message: Record<string, unknown> = { role: 'assistant', content: reply.tokens.length ? reply.tokens.join('') : null };
      if (calls.length) {
        message.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
        ...meta, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: finish }], usage: reported,
      }));
      return;
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const chunk = (delta: Record<string, unknown>, finishReason: string | null) =>
      `data: ${JSON.stringify({ ...meta, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`;
    const pause = () => (reply.delayMs ? new Promise((r) => setTimeout(r, reply.delayMs)) : undefined);
    res.write(chunk({ role: 'assistant', content: '' }, null));
    for (const [i, t] of reply.tokens.entries()) {
      if (reply.kind === 'stream' && reply.gate?.after === i) await reply.gate.open;
      await pause();
      // The client went away (a cancelled run aborts its request): stop talking to nobody.
      if (res.destroyed) return;
      res.write(chunk({ content: t }, null));
      rec.tokensSent++;
    }
    if (reply.kind === 'cut') {
      // Let the tokens reach the client before the connection drops, as a real cut would.
      await new Promise((r) => setTimeout(r, 20));
      rec.ended = 'cut';
      res.destroy();
      return;
    }
    // As the API does: the first chunk of a call names it, later ones carry argument pieces.
    for (const [index, c] of calls.entries()) {
      await pause();
      if (res.destroyed) return;
      res.write(chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] }, null));
      for (const piece of split(c.arguments, c.chunks)) {
        res.write(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }, null));
      }
    }
    res.write(chunk({}, finish));
    if (body.stream_options?.include_usage === true) {
      rec.usage = reported;
      res.write(`data: ${JSON.stringify({ ...meta, object: 'chat.completion.chunk', choices: [], usage: reported })}\n\n`);
    }
    res.end('data: [DONE]\n\n');
  }

  function embeddings(
    body: { model: string; input: string | string[]; dimensions?: number; encoding_format?: string }, res: ServerResponse,
  ): void {
    const input = typeof body.input === 'string' ? [body.input] : body.input;
    if (!Array.isArray(input) || !input.every((s) => typeof s === 'string')) {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'input must be a string or strings' } }));
      return;
    }
    const dimensions = body.dimensions ?? FAKE_EMBEDDING_DIMENSIONS;
    const encoding = body.encoding_format === 'base64' ? 'base64' : 'float';
    embeddingRequests.push({ model: body.model, input, dimensions, encoding });
    const data = input.map((text, index) => {
      const vector = pinned.get(text) ?? fakeEmbedding(text, dimensions);
      // base64 is what the `openai` package asks for by default: little-endian float32s.
      const embedding = encoding === 'base64' ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
      return { object: 'embedding', index, embedding };
    });
    const tokens = input.reduce((n, s) => n + (s.match(/\S+/g)?.length ?? 0), 0);
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
      object: 'list', data, model: body.model, usage: { prompt_tokens: tokens, total_tokens: tokens },
    }));
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  const fake: FakeOpenAI = {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    embeddingRequests,
    script(marker, replies) {
      if (replies.length === 0) throw new Error('script needs at least one reply');
      const earlier = scripts.findIndex((s) => s.marker === marker);
      if (earlier >= 0) scripts.splice(earlier, 1);
      scripts.push({ marker, replies, used: 0 });
    },
    requestsFor: (marker) => requests.filter((r) => lastUser(r.messages).includes(marker)),
    embedding(text, vector) {
      pinned.set(text, vector);
    },
    overload(retryAfterSeconds) {
      overloadNext = retryAfterSeconds;
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
  return track(fake, () => fake.close());
}
