import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { track } from './resources.ts';

/**
 * A small OpenAI-compatible chat completions server for tests: streams answers the way the
 * real API does (SSE chunks, a finish chunk, `[DONE]`), and on request answers 429 with
 * Retry-After, 500, 400, or cuts the stream mid-answer by destroying the socket.
 */
export type FakeReply =
  /** A streamed answer; `finish: 'length'` models a truncation by the model. */
  | { kind: 'stream'; tokens: string[]; finish?: 'stop' | 'length'; delayMs?: number }
  /** Streams `tokens`, then drops the connection without a finish chunk. */
  | { kind: 'cut'; tokens: string[]; delayMs?: number }
  | { kind: 'status'; status: number; retryAfter?: string; message?: string };

export interface RecordedRequest {
  model: string;
  stream: boolean;
  messages: { role: string; content: string }[];
  /** The reply the server chose. */
  reply: FakeReply;
}

export interface FakeOpenAI {
  /** Base URL for the `openai` client (ends in /v1). */
  baseURL: string;
  requests: RecordedRequest[];
  /**
   * Replies, in order, for requests whose last user message contains `marker` (the longest
   * matching marker wins); once they are used up the last one repeats. Requests no script matches get `echo: <content>`.
   */
  script(marker: string, replies: FakeReply[]): void;
  /** Requests whose last user message contains `marker`. */
  requestsFor(marker: string): RecordedRequest[];
  close(): Promise<void>;
}

export async function startFakeOpenAI(): Promise<FakeOpenAI> {
  const scripts: { marker: string; replies: FakeReply[]; used: number }[] = [];
  const requests: RecordedRequest[] = [];
  const lastUser = (msgs: RecordedRequest['messages']) => [...msgs].reverse().find((m) => m.role === 'user')?.content ?? '';

  const choose = (content: string): FakeReply => {
    // The longest matching marker wins, so `#cut` and `#cut-twice` can live side by side.
    const s = scripts.filter((x) => content.includes(x.marker)).sort((a, b) => b.marker.length - a.marker.length)[0];
    if (!s) return { kind: 'stream', tokens: `echo: ${content}`.match(/\s*\S+/g) ?? [] };
    return s.replies[Math.min(s.used++, s.replies.length - 1)];
  };

  const server = createServer((req, res) => {
    void handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'not found' } }));
      return;
    }
    const body = JSON.parse(raw) as { model: string; stream?: boolean; messages: RecordedRequest['messages'] };
    const reply = choose(lastUser(body.messages));
    requests.push({ model: body.model, stream: body.stream === true, messages: body.messages, reply });

    if (reply.kind === 'status') {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (reply.retryAfter !== undefined) headers['retry-after'] = reply.retryAfter;
      res.writeHead(reply.status, headers).end(JSON.stringify({
        error: { message: reply.message ?? `fake provider answered ${reply.status}`, type: 'fake_error', code: null },
      }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const chunk = (delta: Record<string, unknown>, finish: string | null) =>
      `data: ${JSON.stringify({
        id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: Math.floor(Date.now() / 1000), model: body.model,
        choices: [{ index: 0, delta, finish_reason: finish }],
      })}\n\n`;
    res.write(chunk({ role: 'assistant', content: '' }, null));
    for (const t of reply.tokens) {
      if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
      // The client went away (a cancelled run aborts its request): stop talking to nobody.
      if (res.destroyed) return;
      res.write(chunk({ content: t }, null));
    }
    if (reply.kind === 'cut') {
      // Let the tokens reach the client before the connection drops, as a real cut would.
      await new Promise((r) => setTimeout(r, 20));
      res.destroy();
      return;
    }
    res.write(chunk({}, reply.finish ?? 'stop'));
    res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  const fake: FakeOpenAI = {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    script(marker, replies) {
      if (replies.length === 0) throw new Error('script needs at least one reply');
      scripts.push({ marker, replies, used: 0 });
    },
    requestsFor: (marker) => requests.filter((r) => lastUser(r.messages).includes(marker)),
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
