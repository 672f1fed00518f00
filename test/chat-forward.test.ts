import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batonChat } from '../src/server.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { words } from './helpers/stream-check.ts';

/**
 * An app's own chat route (baton-agents/server `batonChat`) between a page and Baton: the page's
 * DefaultChatTransport talks to the app, which holds the key and picks the agent. As an Express
 * middleware and as a fetch-style (Next.js) route handler.
 */
let h: Harness;
let acme: ScopeClient;
let app: Server;
let appUrl: string;
let chat: ReturnType<typeof batonChat>;

beforeAll(async () => {
  h = await useHarness();
  const apiUrl = (await h.startApi()).url;
  await h.startWorker();
  acme = await h.client(apiUrl, 'acme', 'client');
  chat = batonChat({
    url: apiUrl, scope: 'acme', apiKey: acme.key, agent: 'echo', runtime: h.runtime,
    metadata: (req) => ({ user: req.headers.get('x-user') ?? 'anonymous' }),
    // The app's own rule: a user's chats start with their name.
    authorize: (req, chatId) => chatId.startsWith(`${req.headers.get('x-user')}-`),
  });
  const server = express();
  server.use('/api/chat', chat.node);
  app = createServer(server);
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  appUrl = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((r) => app.close(r));
});

const userMessage = (text: string): UIMessage => ({ id: `u-${Math.random()}`, role: 'user', parts: [{ type: 'text', text }] });
const textOf = (m: UIMessage) => m.parts.flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');

async function build(stream: ReadableStream<import('ai').UIMessageChunk>): Promise<UIMessage> {
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream })) last = m;
  return last!;
}

describe('batonChat as an Express middleware', () => {
  const page = (user: string) => new DefaultChatTransport<UIMessage>({ api: `${appUrl}/api/chat`, headers: { 'x-user': user } });

  it('streams a turn to a page that holds no key, with the app\'s agent and metadata, and resumes it', async () => {
    const content = words(30, 'fw');
    const sent = page('ann').sendMessages({
      // The page asks for an agent: the app's choice wins.
      chatId: 'ann-1', messages: [userMessage(content)], trigger: 'submit-message', messageId: undefined, abortSignal: undefined,
      body: { agent: 'someone-else', metadata: { delayMs: 20 } },
    }).then(build);
    await waitFor(async () => (await acme.get('/chat/ann-1/messages')).body.messages.length === 1 || undefined);
    const resumed = await build((await page('ann').reconnectToStream({ chatId: 'ann-1' }))!);
    expect(textOf(resumed)).toBe(content);
    const message = await sent;
    expect(textOf(message)).toBe(content);
    const run = (await acme.get(`/runs/${message.id}`)).body;
    expect(run).toMatchObject({ agent: 'echo', sessionId: 'ann-1', metadata: { user: 'ann', delayMs: 20 } });
    const history = await (await fetch(`${appUrl}/api/chat/ann-1/messages`, { headers: { 'x-user': 'ann' } })).json();
    expect(history.messages.map((m: UIMessage) => m.role)).toEqual(['user', 'assistant']);
    const stop = await fetch(`${appUrl}/api/chat/ann-1/stop`, { method: 'POST', headers: { 'x-user': 'ann' } });
    expect(await stop.json()).toEqual({ stopped: false });
  });

  it('refuses a chat its authorize check refuses, before Baton is asked', async () => {
    const res = await fetch(`${appUrl}/api/chat`, {
      method: 'POST', headers: { 'x-user': 'bob', 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'ann-1', messages: [userMessage('mine now')], trigger: 'submit-message' }),
    });
    expect(res.status).toBe(403);
    expect((await fetch(`${appUrl}/api/chat/ann-1/messages`, { headers: { 'x-user': 'bob' } })).status).toBe(403);
    expect((await acme.get('/chat/ann-1/messages')).body.messages).toHaveLength(2);
  });

  it('passes Baton\'s refusals on as they are', async () => {
    const res = await fetch(`${appUrl}/api/chat`, {
      method: 'POST', headers: { 'x-user': 'ann', 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'ann-2', messages: [], trigger: 'submit-message' }),
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error.code).toBe('VALIDATION_FAILED');
  });
});

describe('batonChat as a fetch-style (Next.js) route handler', () => {
  it('answers the SDK\'s request with the stream, and 204 to a resume when nothing runs', async () => {
    const fetchViaHandler: typeof fetch = async (input, init) => {
      const request = new Request(input as string, init);
      return request.method === 'POST' ? chat.POST(request) : chat.GET(request);
    };
    const t = new DefaultChatTransport<UIMessage>({ api: 'http://next.local/api/chat', headers: { 'x-user': 'cy' }, fetch: fetchViaHandler });
    const message = await build(await t.sendMessages({
      chatId: 'cy-1', messages: [userMessage('from a route handler')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined,
    }));
    expect(textOf(message)).toBe('from a route handler');
    expect(await t.reconnectToStream({ chatId: 'cy-1' })).toBeNull();
  });
});
