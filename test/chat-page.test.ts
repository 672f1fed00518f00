import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser } from './helpers/browser.ts';
import { openChatPage, SDKS, serveChatPage, type ChatPage } from './helpers/chat-page.ts';
import { skipWithout } from './helpers/programs.ts';
import { track } from './helpers/resources.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

interface Seen { method: string; url: string; headers: IncomingMessage['headers']; body: any }

/** A server standing in for the chat route, answering one short UI message stream to every POST. */
async function captureServer(): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer(async (req, res) => {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    res.setHeader('access-control-allow-origin', '*');
    res.setHeader('access-control-allow-headers', 'authorization, content-type');
    if (req.method === 'OPTIONS') return void res.writeHead(204).end();
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: raw ? JSON.parse(raw) : undefined });
    if (req.method === 'GET' && req.url!.endsWith('/messages')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('[]');
    if (req.method === 'GET') return void res.writeHead(204).end();
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-vercel-ai-ui-message-stream': 'v1' });
    for (const chunk of [
      { type: 'start', messageId: 'm-1' }, { type: 'text-start', id: 't-1' }, { type: 'text-delta', id: 't-1', delta: 'Hello' },
      { type: 'text-delta', id: 't-1', delta: ' there.' }, { type: 'text-end', id: 't-1' }, { type: 'finish' },
    ]) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    res.end('data: [DONE]\n\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  track(server, () => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

let browser: BrowserContext;
const opened: ChatPage[] = [];

beforeAll(async () => {
  if (!noChromium) browser = await launchBrowser();
});

afterAll(async () => {
  for (const p of opened) await p.page.close();
});

describe.skipIf(noChromium).each(SDKS)('a useChat page built with $name', (sdk) => {
  let origin: string;
  beforeAll(async () => {
    ({ origin } = await serveChatPage(sdk));
  });

  it('loads the history, asks to resume, POSTs the SDK body with the key and shows the answer', async () => {
    const server = await captureServer();
    const page = await openChatPage(browser, origin, { baton: server.url, scope: 'acme', key: 'k-1', chat: 'chat-1', agent: 'fx-chat' });
    opened.push(page);
    await page.send('Hi');
    const shown = await page.until((m) => m[1]?.text === 'Hello there.', 'the answer');
    expect(shown.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(server.seen.map((s) => `${s.method} ${s.url}`)).toEqual([
      'GET /v1/scopes/acme/chat/chat-1/messages',
      'GET /v1/scopes/acme/chat/chat-1/stream',
      'POST /v1/scopes/acme/chat',
    ]);
    expect(server.seen.every((s) => s.headers.authorization === 'Bearer k-1')).toBe(true);
    expect(server.seen[2].body).toMatchObject({ id: 'chat-1', trigger: 'submit-message', agent: 'fx-chat', messages: [{ role: 'user', parts: [{ type: 'text', text: 'Hi' }] }] });
    expect(page.errors).toEqual([]);
  });
});
