import { DefaultChatTransport, readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createChatAgent, defineTool } from '../src/lib/agents/chat.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { answer, callTools, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { words } from './helpers/stream-check.ts';

/**
 * The chat routes through the AI SDK's own client code: DefaultChatTransport sends, resumes and
 * parses (its uiMessageChunkSchema checks every chunk), readUIMessageStream builds the message
 * as useChat would. Real API and worker processes, the fake OpenAI server for the model.
 */
let h: Harness;
let apiUrl: string;
let acme: ScopeClient;
let fake: FakeOpenAI;
const ORIGIN = 'http://chat-page.test';
/** Runs of the approval-gated tool, by order id. */
const refunds = new Map<string, number>();

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  apiUrl = (await h.startApi({ CORS_ORIGINS: ORIGIN })).url;
  const common = { model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key' };
  await h.startWorker({
    agents: [defineAgent({
      name: 'reporter',
      async run(ctx) {
        ctx.emitData('progress', { done: 0 }, { id: 'p' });
        ctx.emit('Looking. ');
        ctx.emitData('progress', { done: 1 }, { id: 'p' });
        ctx.emitData('source', { url: 'https://example.com/a' });
        ctx.emitData('typing', { who: 'reporter' }, { transient: true });
        ctx.emit('Found it.');
        return 'Looking. Found it.';
      },
    }), defineAgent({
      name: 'failing',
      run(ctx) {
        ctx.emit('Half an answer');
        throw new Error('the ledger is closed');
      },
    }), createChatAgent({
      ...common, name: 'cashier', tools: {
        refund: defineTool({
          description: 'Refunds an order; a person approves each call first.',
          parameters: z.object({ order: z.string() }),
          approval: true,
          execute({ order }) {
            refunds.set(order, (refunds.get(order) ?? 0) + 1);
            return { refunded: order };
          },
        }),
      },
    })],
  });
  acme = await h.client(apiUrl, 'acme', 'client');
});

const chatApi = () => `${apiUrl}/v1/scopes/acme/chat`;

function transport(body: Record<string, unknown> = {}, lastEventId?: string) {
  return new DefaultChatTransport<UIMessage>({
    api: chatApi(), headers: { authorization: acme.headers.authorization }, body: { runtime: h.runtime, ...body },
    ...(lastEventId ? { prepareReconnectToStreamRequest: ({ headers }) => ({ headers: { ...headers, 'Last-Event-ID': lastEventId } }) } : {}),
  });
}

const userMessage = (text: string, id = `u-${Math.random()}`): UIMessage => ({ id, role: 'user', parts: [{ type: 'text', text }] });

function send(chatId: string, messages: UIMessage[], body: Record<string, unknown> = {}, signal?: AbortSignal) {
  return transport(body).sendMessages({ chatId, messages, trigger: 'submit-message', messageId: undefined, abortSignal: signal });
}

/** Every chunk of a stream, and the message the SDK builds from them (continuing `message` when given). */
async function read(stream: ReadableStream<UIMessageChunk>, message?: UIMessage) {
  const chunks: UIMessageChunk[] = [];
  const [mine, sdk] = stream.tee();
  const collect = (async () => { for await (const c of mine) chunks.push(c); })();
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream: sdk, message })) last = structuredClone(m);
  await collect;
  return { chunks, message: last! };
}

/** SSE text as the SDK's transport parses it (its parser and chunk schema, fed this text as a response). */
async function sdkChunks(text: string): Promise<UIMessageChunk[]> {
  const t = new DefaultChatTransport<UIMessage>({ api: 'http://unused.test', fetch: async () => new Response(text) });
  const stream = await t.sendMessages({ chatId: 'x', messages: [], trigger: 'submit-message', messageId: undefined, abortSignal: undefined });
  const out: UIMessageChunk[] = [];
  for await (const c of stream) out.push(c);
  return out;
}

/** Reads a raw POST …/chat answer until `enough(textSoFar)`, then leaves it (the run goes on). */
async function rawUntil(chatId: string, content: string, enough: (text: string) => boolean, body: Record<string, unknown> = {}) {
  const res = await fetch(chatApi(), {
    method: 'POST', headers: { ...acme.headers, 'content-type': 'application/json' },
    body: JSON.stringify({ id: chatId, messages: [userMessage(content)], trigger: 'submit-message', runtime: h.runtime, ...body }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  while (!enough(text)) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  await reader.cancel();
  return { text, runId: res.headers.get('baton-run-id')! };
}

const textOf = (m: UIMessage) => m.parts.flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
const textParts = (m: UIMessage) => m.parts.filter((p) => p.type === 'text');
const deltas = (text: string) => text.split('"type":"text-delta"').length - 1;

describe('POST …/chat', () => {
  it('answers with the SDK\'s UI message stream: its headers, data: chunks carrying Baton event ids, [DONE]', async () => {
    const res = await fetch(chatApi(), {
      method: 'POST', headers: { ...acme.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'c-raw', messages: [userMessage('hello there you')], trigger: 'submit-message', runtime: h.runtime }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const ids = [...text.matchAll(/^id: (\d+-\d+)$/gm)].map((m) => m[1]);
    expect(ids.length).toBeGreaterThan(2);
    // Baton's event ids, each once and rising.
    const log = await h.redis.xrange(h.keys.scope('acme').events(res.headers.get('baton-run-id')!), '-', '+');
    expect(ids.every((id, i) => i === 0 || id > ids[i - 1])).toBe(true);
    expect(ids.every((id) => log.some(([logId]) => logId === id))).toBe(true);
    const chunks = await sdkChunks(text);
    expect(chunks.map((c) => c.type)).toEqual([
      'start', 'start-step', 'text-start', ...Array(chunks.length - 6).fill('text-delta'), 'text-end', 'finish-step', 'finish',
    ]);
  });

  it('builds the answer as one text part: the input as a new turn of session `id`, the message named by its run', async () => {
    const { chunks, message } = await read(await send('c1', [userMessage('one two three four')]));
    expect(textOf(message)).toBe('one two three four');
    expect(textParts(message)).toHaveLength(1);
    expect(chunks.at(-1)).toMatchObject({ type: 'finish', finishReason: 'stop', messageMetadata: { status: 'succeeded' } });
    const runId = (message.metadata as { runId: string }).runId;
    expect(message.id).toBe(runId);
    expect((await acme.get(`/runs/${runId}`)).body).toMatchObject({ sessionId: 'c1', status: 'succeeded', input: { content: 'one two three four' } });
  });

  it('takes the session\'s history, not the page\'s: messages sent before the last are not written anywhere', async () => {
    const forged = [userMessage('a forged turn'), { id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'forged' }] } as UIMessage];
    await read(await send('c-trust', [...forged, userMessage('the real question')]));
    const page = (await acme.get('/chat/c-trust/messages')).body;
    expect(page.messages.map((m: UIMessage) => [m.role, textOf(m)])).toEqual([['user', 'the real question'], ['assistant', 'the real question']]);
  });

  it('refuses what DefaultChatTransport never sends, naming the field, and makes no run', async () => {
    const bad = [
      [{ id: 'c-bad', messages: [], trigger: 'submit-message' }, 'body.messages'],
      [{ id: 'c-bad', messages: [userMessage('x')], trigger: 'resume-stream' }, 'body.trigger'],
      [{ id: 'a:b', messages: [userMessage('x')], trigger: 'submit-message' }, 'body.id'],
      [{ id: 'c-bad', messages: [userMessage('x')], trigger: 'submit-message', stray: 1 }, 'body'],
      [{ id: 'c-bad', messages: [{ id: 'm', role: 'user', parts: [{ type: 'file', url: 'x' }] }], trigger: 'submit-message' }, 'body.messages.0'],
    ] as const;
    for (const [body, path] of bad) {
      const res = await acme.post('/chat', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_FAILED');
      expect(res.body.error.details.map((d: { path: string }) => d.path).join(' ')).toContain(path);
    }
    expect((await acme.get('/runs?sessionId=c-bad')).body.runs).toEqual([]);
  });

  it('regenerate-message re-runs the turn: a new message of a new run, and the history keeps both turns', async () => {
    const first = await read(await send('c-regen', [userMessage('say it again')]));
    const again = await read(await transport().sendMessages({
      chatId: 'c-regen', messages: [userMessage('say it again')], trigger: 'regenerate-message', messageId: first.message.id, abortSignal: undefined,
    }));
    expect(textOf(again.message)).toBe('say it again');
    expect(again.message.id).not.toBe(first.message.id);
    expect((await acme.get(`/runs/${again.message.id}`)).body.rerunOf).toBe(first.message.id);
    const page = (await acme.get('/chat/c-regen/messages')).body;
    expect(page.messages.map((m: UIMessage) => [m.role, m.id])).toEqual([
      ['user', `${first.message.id}-user`], ['assistant', first.message.id], ['user', `${again.message.id}-user`], ['assistant', again.message.id],
    ]);
  });
});

describe('a turn that fails', () => {
  it('ends with the SDK\'s error chunk, its message the run\'s error, and the history keeps the partial answer incomplete', async () => {
    const t = transport({ agent: 'failing' });
    const stream = await t.sendMessages({ chatId: 'c-fail', messages: [userMessage('try')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined });
    const chunks: UIMessageChunk[] = [];
    for await (const c of stream) chunks.push(c);
    const run = (await acme.get(`/runs/${(chunks[0] as { messageId: string }).messageId}`)).body;
    expect(run.status).toBe('failed');
    expect(chunks.at(-1)).toEqual({ type: 'error', errorText: `${run.lastError.code}: ${run.lastError.message}` });
    expect(chunks.at(-2)).toMatchObject({ type: 'message-metadata', messageMetadata: { status: 'failed', incomplete: true } });
    const history = (await acme.get('/chat/c-fail/messages')).body.messages as UIMessage[];
    expect(history.map((m) => [m.role, textOf(m), (m.metadata as { incomplete?: boolean }).incomplete])).toEqual([
      ['user', 'try', undefined], ['assistant', 'Half an answer', true],
    ]);
  });
});

describe('ctx.emitData', () => {
  it('reaches the page as data-<name> parts: one per id (the last replaces the first), transient data in no part', async () => {
    const { chunks, message } = await read(await send('c-data', [userMessage('report')], { agent: 'reporter' }));
    expect(message.parts.filter((p) => p.type.startsWith('data-'))).toEqual([
      { type: 'data-progress', id: 'p', data: { done: 1 } }, { type: 'data-source', data: { url: 'https://example.com/a' } },
    ]);
    expect(chunks).toContainEqual({ type: 'data-typing', data: { who: 'reporter' }, transient: true });
    expect(textOf(message)).toBe('Looking. Found it.');
    // Streamed, never stored: the history holds the text.
    expect(((await acme.get('/chat/c-data/messages')).body.messages as UIMessage[]).map(textOf)).toEqual(['report', 'Looking. Found it.']);
  });
});

describe('GET …/chat/{chatId}/stream and …/messages', () => {
  it('a reload mid-answer: the history holds the question, the resumed stream replays the answer from its start, once', async () => {
    const content = words(40, 'rl');
    const { runId } = await rawUntil('c-reload', content, (t) => deltas(t) >= 3, { metadata: { delayMs: 25 } });
    const page = (await acme.get('/chat/c-reload/messages')).body;
    expect(page.messages.map((m: UIMessage) => [m.id, m.role, textOf(m)])).toEqual([[`${runId}-user`, 'user', content]]);
    const resumed = await transport().reconnectToStream({ chatId: 'c-reload' });
    const { chunks, message } = await read(resumed!);
    expect(chunks[0]).toMatchObject({ type: 'start', messageId: runId });
    expect(textOf(message)).toBe(content);
    expect(textParts(message)).toHaveLength(1);
    // Nothing runs now: 204, which the SDK reads as nothing to resume.
    expect(await transport().reconnectToStream({ chatId: 'c-reload' })).toBeNull();
    const after = (await acme.get('/chat/c-reload/messages')).body.messages as UIMessage[];
    expect(after.map((m) => [m.id, m.role, textOf(m)])).toEqual([[`${runId}-user`, 'user', content], [runId, 'assistant', content]]);
  });

  it('with Last-Event-ID: the rest of the answer after that event, which joined to what was read is the whole answer once', async () => {
    const content = words(40, 'le');
    const { text } = await rawUntil('c-last', content, (t) => deltas(t) >= 4, { metadata: { delayMs: 25 } });
    // What was read up to the last complete frame that carried an id.
    const frames = text.split('\n\n');
    let lastWithId = frames.length - 2;
    while (!/^id: /m.test(frames[lastWithId])) lastWithId--;
    const head = `${frames.slice(0, lastWithId + 1).join('\n\n')}\n\n`;
    const lastId = /^id: (\S+)$/m.exec(frames[lastWithId])![1];
    const res = await fetch(`${chatApi()}/c-last/stream`, { headers: { ...acme.headers, 'last-event-id': lastId } });
    expect(res.status).toBe(200);
    const rest = await res.text();
    expect(rest).not.toContain('"type":"start"');
    const all = await sdkChunks(head + rest);
    const { message } = await read(new ReadableStream({ start(c) { all.forEach((x) => c.enqueue(x)); c.close(); } }));
    expect(textOf(message)).toBe(content);
  });

  it('a second tab opened mid-answer follows it to its end; both read the same message', async () => {
    const content = words(30, 'tab');
    const first = send('c-tabs', [userMessage(content)], { metadata: { delayMs: 25 } }).then((s) => read(s));
    await waitFor(async () => (await acme.get('/chat/c-tabs/messages')).body.messages.length === 1 || undefined, 10_000, 'the turn to start');
    const second = await read((await transport().reconnectToStream({ chatId: 'c-tabs' }))!);
    expect(textOf(second.message)).toBe(content);
    expect(textOf((await first).message)).toBe(content);
    expect(second.message.id).toBe((await first).message.id);
  });

  it('answers 204 for a chat with no turn running, and pages the history', async () => {
    expect((await fetch(`${chatApi()}/c-none/stream`, { headers: acme.headers })).status).toBe(204);
    expect((await acme.get('/chat/c-none/messages')).body).toEqual({ messages: [], nextCursor: null });
    const page = (await acme.get('/chat/c1/messages?limit=1')).body;
    expect(page.messages).toHaveLength(1);
    expect(page.nextCursor).toBe('1');
  });
});

describe('POST …/chat/{chatId}/stop', () => {
  it('cancels the turn from another tab: every open stream ends with abort, the history keeps the partial answer marked incomplete', async () => {
    const content = words(200, 'st');
    const first = send('c-stop', [userMessage(content)], { metadata: { delayMs: 20 } }).then((s) => read(s));
    await waitFor(async () => (await acme.get('/chat/c-stop/messages')).body.messages.length === 1 || undefined, 10_000, 'the turn to start');
    const second = read((await transport().reconnectToStream({ chatId: 'c-stop' }))!);
    await waitFor(async () => (await h.redis.xlen(h.keys.scope('acme').events((await acme.get('/runs?sessionId=c-stop')).body.runs[0].id))) > 8 || undefined);
    const stopped = await acme.post('/chat/c-stop/stop');
    expect(stopped.status).toBe(200);
    expect(stopped.body.stopped).toBe(true);
    const runId = stopped.body.run.id;
    for (const tab of [await first, await second]) {
      expect(tab.chunks.at(-1)).toEqual({ type: 'abort', reason: 'cancelled' });
      expect(tab.message.metadata).toMatchObject({ runId, status: 'cancelled', incomplete: true });
    }
    expect((await acme.waitStatus(runId, ['cancelled'])).status).toBe('cancelled');
    const history = (await acme.get('/chat/c-stop/messages')).body.messages as UIMessage[];
    expect(history.map((m) => [m.role, m.metadata])).toEqual([
      ['user', expect.objectContaining({ runId })], ['assistant', expect.objectContaining({ runId, incomplete: true })],
    ]);
    const partial = textOf(history[1]);
    expect(partial.length).toBeGreaterThan(0);
    expect(content.startsWith(partial) && partial.length < content.length).toBe(true);
    expect(textOf((await first).message)).toBe(partial);
    // Nothing runs any more.
    expect((await acme.post('/chat/c-stop/stop')).body).toEqual({ stopped: false });
  });
});

describe('tools and approvals', () => {
  it('a call waiting for approval shows as the SDK\'s tool part; the answer on the next POST runs the tool once and the answer streams on', async () => {
    fake.script('#refund-chat', [callTools([{ id: 'call-r1', name: 'refund', arguments: { order: 'B-7' } }]), answer('Refunded B-7.')]);
    const question = userMessage('Refund B-7 please #refund-chat');
    const asked = await read(await send('c-approve', [question], { agent: 'cashier' }));
    expect(asked.chunks.map((c) => c.type)).toEqual([
      'start', 'start-step', 'tool-input-available', 'tool-approval-request', 'finish-step', 'finish',
    ]);
    const part = asked.message.parts.find((p) => p.type === 'dynamic-tool')!;
    expect(part).toMatchObject({ toolName: 'refund', toolCallId: 'call-r1', state: 'approval-requested', input: { order: 'B-7' } });
    expect(refunds.get('B-7')).toBeUndefined();

    // What addToolApprovalResponse makes of the part, sent as the SDK sends it.
    const answered = structuredClone(asked.message);
    const p = answered.parts.find((x) => x.type === 'dynamic-tool') as { state: string; approval: { id: string; approved?: boolean } };
    p.state = 'approval-responded';
    p.approval = { ...p.approval, approved: true };
    const after = await read(await send('c-approve', [question, answered], { agent: 'cashier' }), structuredClone(answered));
    expect(after.chunks[0]).toMatchObject({ type: 'start', messageId: asked.message.id });
    expect(after.message.id).toBe(asked.message.id);
    expect(after.message.parts.filter((x) => x.type !== 'step-start').map((x) => [x.type, (x as { state?: string }).state])).toEqual([
      ['dynamic-tool', 'output-available'], ['text', 'done'],
    ]);
    expect(after.message.parts.find((x) => x.type === 'dynamic-tool')).toMatchObject({ output: { refunded: 'B-7' } });
    expect(textOf(after.message)).toBe('Refunded B-7.');
    const run = await acme.get(`/runs/${asked.message.id}`);
    expect(after.chunks.at(-1)).toMatchObject({ type: 'finish', messageMetadata: { usage: run.body.result.usage } });
    expect(refunds.get('B-7')).toBe(1);
    // The same answer again (a page that sends it twice): the wait took it once.
    const twice = await acme.post('/chat', { id: 'c-approve', messages: [question, answered], trigger: 'submit-message', runtime: h.runtime, agent: 'cashier' });
    expect(twice.status, JSON.stringify(twice.body)).toBe(409);
    expect(twice.body.error.code).toBe('WAIT_NOT_PENDING');
    expect(refunds.get('B-7')).toBe(1);
  });
});

describe('CORS', () => {
  it('answers a page\'s preflight for POST with JSON and Authorization, and for the GET routes with Last-Event-ID', async () => {
    const pre = (path: string, method: string, headers: string) => fetch(`${apiUrl}/v1/scopes/acme${path}`, {
      method: 'OPTIONS', headers: { origin: ORIGIN, 'access-control-request-method': method, 'access-control-request-headers': headers },
    });
    for (const [path, method, headers] of [
      ['/chat', 'POST', 'authorization,content-type'], ['/chat/c1/stop', 'POST', 'authorization,content-type'],
      ['/chat/c1/stream', 'GET', 'authorization,last-event-id'], ['/chat/c1/messages', 'GET', 'authorization'],
    ]) {
      const res = await pre(path, method, headers);
      expect(res.status, path).toBe(204);
      expect(res.headers.get('access-control-allow-origin'), path).toBe(ORIGIN);
      expect(res.headers.get('access-control-allow-methods'), path).toBe(method);
      for (const h of headers.split(',')) expect(res.headers.get('access-control-allow-headers')!.toLowerCase(), path).toContain(h);
    }
    const other = await fetch(`${apiUrl}/v1/scopes/acme/chat`, { method: 'OPTIONS', headers: { origin: 'http://elsewhere.test', 'access-control-request-method': 'POST' } });
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
    // The answer itself carries the origin, errors included.
    const refused = await fetch(chatApi(), { method: 'POST', headers: { origin: ORIGIN, 'content-type': 'application/json' }, body: '{}' });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('access-control-allow-origin')).toBe(ORIGIN);
  });
});

describe('a worker SIGKILLed mid-answer', () => {
  it('another attempt answers again: the page that reads on, and one that resumes after, end with the whole answer once, in one part', async () => {
    // Its own runtime, served by worker processes only (the file's in-process worker is not killed).
    const runtime = `${h.runtime}-kill`;
    const a = await h.spawn('worker', { env: { RUNTIME: runtime } });
    // 200 tokens 40 ms apart: the kill comes well before the end, however slow a worker starts.
    const content = words(200, 'kill');
    const reading = send('c-kill', [userMessage(content)], { runtime, metadata: { delayMs: 40 } }).then((s) => read(s));
    const runId = await waitFor(async () => (await acme.get('/runs?sessionId=c-kill')).body.runs[0]?.id as string | undefined);
    await waitFor(async () => (await h.redis.xlen(h.keys.scope('acme').events(runId))) > 10 || undefined, 20_000, 'tokens before the kill');
    const b = await h.spawn('worker', { env: { RUNTIME: runtime } });
    await a.kill('SIGKILL');
    const resumed = read((await transport().reconnectToStream({ chatId: 'c-kill' }))!);
    expect(textOf((await resumed).message)).toBe(content);
    expect(textParts((await resumed).message)).toHaveLength(1);
    const { chunks, message } = await reading;
    expect(textOf(message)).toBe(content);
    expect(textParts(message)).toHaveLength(1);
    expect(chunks.at(-1)).toMatchObject({ type: 'finish', finishReason: 'stop' });
    const run = (await acme.get(`/runs/${runId}`)).body;
    expect(run, JSON.stringify(run)).toMatchObject({ status: 'succeeded', recoveries: 1 });
    // The log holds the answer twice over (the lost attempt's part, then the new attempt's whole).
    const log = await h.redis.xrange(h.keys.scope('acme').events(runId), '-', '+');
    expect(log.filter(([, f]) => f[1] === 'attempt')).toHaveLength(2);
    expect((await acme.get('/chat/c-kill/messages')).body.messages.map((m: UIMessage) => textOf(m))).toEqual([content, content]);
    await b.close();
  });
});
