import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { BatonApiError, BatonClient, BatonStreamError, type RunStreamEvent } from '../src/client.ts';
import { defineAgent, TransientError } from '../src/index.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';
import { startSseProxy } from './helpers/sse-proxy.ts';
import { expectExactly, fullLog, words, type Seen } from './helpers/stream-check.ts';

/** Emits part of an answer, fails transiently on its first attempt, answers on the second. */
const flaky = defineAgent({
  name: 'flaky-once',
  async run(ctx) {
    ctx.emit('half an ');
    if (ctx.attempt === 1) throw new TransientError('model overloaded');
    ctx.emit('answer');
    return 'half an answer';
  },
});

let h: Harness;
let apiUrl: string;
let key: string;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({ agents: [flaky] });
  apiUrl = api.url;
  key = await h.key('acme', 'client');
});

/** The client's two transports: Node's http module (its default in Node) and fetch (its default elsewhere). */
const TRANSPORTS = [
  { tag: 'node-http', fetch: undefined },
  { tag: 'fetch', fetch: globalThis.fetch },
];

/** A stand-in API answering with `handler`, closed after the file; resolves with its URL. */
async function fakeApi(handler: RequestListener): Promise<string> {
  const fake = createServer(handler);
  await new Promise<void>((r) => fake.listen(0, '127.0.0.1', () => r()));
  track(fake, () => new Promise<void>((r) => { fake.closeAllConnections(); fake.close(() => r()); }));
  return `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
}

const asSeen = (events: RunStreamEvent[]): Seen[] => events.map((e) => ({ id: e.id, type: e.type, data: e.data }));
const textOf = (events: RunStreamEvent[]) =>
  events.flatMap((e) => (e.type === 'token' ? [e.data.text] : [])).join('');

/** Every test runs over both transports (a caller's own fetch goes through the fetch one). */
describe.each(TRANSPORTS)('typed client over $tag', ({ tag, fetch }) => {
  const client = (o: ConstructorParameters<typeof BatonClient>[0]) => new BatonClient({ ...o, fetch });
  let c: BatonClient;
  beforeAll(() => {
    c = client({ url: apiUrl, apiKey: key, scope: 'acme' });
  });

  it('submit, tokens, get and messages', async () => {
    const content = words(40, 'tc');
    const run = await c.submit({ sessionId: `typed-${tag}`, input: { content }, runtime: h.runtime, metadata: { delayMs: 2 } });
    expect(run).toMatchObject({ status: 'queued', sessionId: `typed-${tag}`, agent: 'echo', runtime: h.runtime });
    let text = '';
    const attempts: number[] = [];
    for await (const t of c.tokens(run.id, { onAttempt: (a) => attempts.push(a.attempt) })) text += t;
    expect(text).toBe(content);
    expect(attempts).toEqual([1]);
    const done = await c.get(run.id);
    expect(done).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: content, finishReason: 'stop' } });
    const page = await c.messages(`typed-${tag}`);
    expect(page.messages.map((m) => [m.role, m.content])).toEqual([['user', content], ['assistant', content]]);
    expect(page.nextCursor).toBeNull();
  });

  it('stream() resumes by itself through a connection cut after every k events (k random 1..10): 2,000 tokens, each once', async () => {
    const proxy = await startSseProxy(apiUrl, { cutAfterEvents: () => 1 + Math.floor(Math.random() * 10) });
    const viaProxy = client({ url: proxy.url, apiKey: key, scope: 'acme' });
    const content = words(2000, 'cut');
    const run = await viaProxy.submit({ sessionId: `typed-cut-${tag}`, input: { content }, runtime: h.runtime, metadata: { delayMs: 1 } });
    const got: RunStreamEvent[] = [];
    for await (const e of viaProxy.stream(run.id)) got.push(e);
    expect(textOf(got)).toBe(content);
    expect(got.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded', result: { answer: content } } });
    expectExactly(asSeen(got), await fullLog(h, 'acme', run.id));
    expect(proxy.cuts).toBeGreaterThan(10);
    console.log(`typed client over ${tag}: ${got.length} events over ${proxy.cuts + 1} connections, each exactly once`);
  });

  it('an attempt event starts the answer over: a retried run streams both attempts, the answer is the last', async () => {
    const run = await c.submit({ sessionId: `typed-retry-${tag}`, input: { content: 'go' }, runtime: h.runtime, agent: 'flaky-once' });
    const events: RunStreamEvent[] = [];
    for await (const e of c.stream(run.id)) events.push(e);
    // Consecutive token events are one stretch of text (how coalescing splits it depends on timing).
    const shape: string[] = [];
    for (const e of events) {
      if (e.type === 'token' && shape.at(-1)?.startsWith('token:')) shape[shape.length - 1] += e.data.text;
      else shape.push(e.type === 'token' ? `token:${e.data.text}` : e.type === 'status' ? `status:${e.data.status}` : e.type);
    }
    expect(shape).toEqual([
      'status:queued', 'attempt', 'status:running', 'token:half an ', 'status:retrying',
      'attempt', 'status:running', 'token:half an answer', 'end',
    ]);
    const retrying = events.find((e) => e.type === 'status' && e.data.status === 'retrying');
    expect(retrying?.data).toMatchObject({ attempt: 1, maxAttempts: 3, lastError: { code: 'TRANSIENT', message: 'model overloaded' } });
    // What a display keeps: the text after the last `attempt` event.
    const lastAttempt = events.map((e) => e.type).lastIndexOf('attempt');
    expect(textOf(events.slice(lastAttempt))).toBe('half an answer');
    expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded', result: { answer: 'half an answer' } } });
  });

  it('cancel, and a stream resumed after its end returns at once', async () => {
    // No worker serves this runtime: the run stays queued until cancelled.
    const run = await c.submit({ sessionId: `typed-cancel-${tag}`, input: { content: 'never' }, runtime: `${h.runtime}-idle` });
    const cancelled = await c.cancel(run.id);
    expect(cancelled.status).toBe('cancelled');
    const events: RunStreamEvent[] = [];
    for await (const e of c.stream(run.id)) events.push(e);
    expect(events.map((e) => e.type)).toEqual(['status', 'end']);
    expect(events[1]).toMatchObject({ data: { status: 'cancelled', result: { finishReason: 'cancelled' } } });
    const again: RunStreamEvent[] = [];
    for await (const e of c.stream(run.id, { after: events[1].id })) again.push(e);
    expect(again).toEqual([]);
  });

  it('typed errors: unknown run, bad key, API unreachable', async () => {
    const err = await c.get('nope').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BatonApiError);
    expect(err).toMatchObject({ status: 404, code: 'RUN_NOT_FOUND' });
    const streamErr = await (async () => { for await (const _ of c.stream('nope')) { /* none */ } })().catch((e: unknown) => e);
    expect(streamErr).toMatchObject({ status: 404, code: 'RUN_NOT_FOUND' });
    const badKey = client({ url: apiUrl, apiKey: 'bk_wrong', scope: 'acme' });
    expect(await badKey.get('nope').catch((e: unknown) => e)).toMatchObject({ status: 401, code: 'UNAUTHENTICATED' });

    // A port nobody listens on: stream() retries with backoff, then gives up with a typed error.
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const unreachable = client({ url: `http://127.0.0.1:${port}`, apiKey: key, scope: 'acme', maxReconnects: 2 });
    const gaveUp = await (async () => { for await (const _ of unreachable.stream('any')) { /* none */ } })().catch((e: unknown) => e);
    expect(gaveUp).toBeInstanceOf(BatonStreamError);
  });

  it('a connection that goes silent (no keep-alive) is dropped and resumed from the last id', async () => {
    const requests: (string | undefined)[] = [];
    const url = await fakeApi((req, res) => {
      requests.push(req.headers['last-event-id'] as string | undefined);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (requests.length === 1) {
        // One event, then silence: a half-open connection.
        res.write('retry: 100\n\nid: 1-0\nevent: status\ndata: {"status":"queued","attempt":0}\n\n');
        return;
      }
      res.end('id: 2-0\nevent: end\ndata: {"status":"succeeded","result":{"answer":"","finishReason":"stop","toolCallsSeen":0}}\n\n');
    });
    const c = client({ url, apiKey: key, scope: 'acme', idleTimeoutMs: 300 });
    const got: RunStreamEvent[] = [];
    for await (const e of c.stream('r1')) got.push(e);
    expect(got.map((e) => [e.id, e.type])).toEqual([['1-0', 'status'], ['2-0', 'end']]);
    expect(requests).toEqual([undefined, '1-0']);
  });
});

describe('typed client transports', () => {
  it("without Node's http module (a browser), works with a fetch that refuses to be called as a method of another object", async () => {
    const real = globalThis.fetch;
    const getBuiltin = process.getBuiltinModule;
    let calls = 0;
    // What Chromium does: fetch called with a `this` other than the global object is a TypeError.
    globalThis.fetch = function (this: unknown, input: RequestInfo | URL, init?: RequestInit) {
      if (this !== undefined && this !== globalThis) throw new TypeError("Failed to execute 'fetch' on 'Window': Illegal invocation");
      calls++;
      return real(input, init);
    } as typeof fetch;
    (process as { getBuiltinModule?: unknown }).getBuiltinModule = undefined;
    try {
      const browserLike = new BatonClient({ url: apiUrl, apiKey: key, scope: 'acme' });
      const run = await browserLike.submit({ sessionId: 'browser-fetch', input: { content: 'from a page' }, runtime: h.runtime });
      expect((await browserLike.get(run.id)).id).toBe(run.id);
      expect(calls).toBe(2);
    } finally {
      globalThis.fetch = real;
      process.getBuiltinModule = getBuiltin;
    }
  });

  it('in Node, streams read up to their `end` leave their connection to the next request', async () => {
    const sockets = new Set<unknown>();
    const url = await fakeApi((req, res) => {
      sockets.add(req.socket);
      req.resume();
      req.on('end', () => {
        res.writeHead(202, { 'content-type': 'text/event-stream', 'baton-run-id': 'r1' });
        res.end('id: 1-0\nevent: end\ndata: {"status":"succeeded","result":{"answer":"","finishReason":"stop","toolCallsSeen":0}}\n\n');
      });
    });
    const c = new BatonClient({ url, apiKey: key, scope: 'acme' });
    for (let i = 0; i < 3; i++) {
      const { events } = await c.submitAndStream({ sessionId: 'reuse', input: { content: 'x' } });
      const types: string[] = [];
      for await (const e of events) types.push(e.type);
      expect(types).toEqual(['end']);
    }
    expect(sockets.size).toBe(1);
  });

  it.each(TRANSPORTS)('over $tag, a signal aborted before the answer ends the stream with its reason', async ({ fetch }) => {
    let held = 0;
    const url = await fakeApi(() => { held++; });
    const c = new BatonClient({ url, apiKey: key, scope: 'acme', fetch });
    const stop = new AbortController();
    const reason = new Error('reader left');
    const reading = (async () => { for await (const _ of c.stream('r1', { signal: stop.signal })) { /* none */ } })();
    await vi.waitFor(() => expect(held).toBe(1));
    stop.abort(reason);
    await expect(reading).rejects.toBe(reason);
  });
});
