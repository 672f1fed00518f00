import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { build } from 'esbuild';
import type { BrowserContext, Locator } from 'playwright-core';
import { openPage, type WatchedPage } from './browser.ts';
import { ROOT, waitFor } from './harness.ts';
import { track } from './resources.ts';

/**
 * The chat page of test/fixtures/chat-page, bundled with esbuild against each AI SDK major a
 * user may have, served from a static server of its own origin, and driven in Chromium.
 */

const modules = join(ROOT, 'node_modules');

/**
 * The SDK pairs a page is built with: `ai` and the `@ai-sdk/react` that speaks to it. npm keeps
 * both on disk side by side (@ai-sdk/react 4 with its own ai 7 nested under it; @ai-sdk/react 3
 * installed as `ai-sdk-react-v3` beside the top-level ai 6), and esbuild's `alias` points the
 * page's bare imports at the right copy. `copies` are the package folders the bundle's inputs
 * must come from, exactly, so a resolution slip cannot make both builds the same.
 */
export const SDKS = [
  {
    id: 'ai7',
    name: 'ai 7 + @ai-sdk/react 4',
    alias: { 'ai': join(modules, '@ai-sdk/react/node_modules/ai'), '@ai-sdk/react': join(modules, '@ai-sdk/react') },
    copies: ['@ai-sdk/react', '@ai-sdk/react/node_modules/ai'],
  },
  {
    id: 'ai6',
    name: 'ai 6 + @ai-sdk/react 3',
    alias: { 'ai': join(modules, 'ai'), '@ai-sdk/react': join(modules, 'ai-sdk-react-v3') },
    copies: ['ai', 'ai-sdk-react-v3'],
  },
] as const;
export type Sdk = (typeof SDKS)[number];

/** The SDK package folder an input path lies in (a package's own node_modules excluded). */
const SDK_COPY = /node_modules\/((?:@ai-sdk\/react\/node_modules\/)?ai|ai-sdk-react-v3|@ai-sdk\/react)\/(?!node_modules\/)/;

/** The page's script, bundled for a browser against `sdk`'s copies of `ai` and `@ai-sdk/react`. */
export async function bundleChatPage(sdk: Sdk): Promise<string> {
  const out = await build({
    entryPoints: [join(ROOT, 'test/fixtures/chat-page/page.jsx')],
    bundle: true,
    write: false,
    metafile: true,
    format: 'esm',
    platform: 'browser',
    target: 'chrome120',
    jsx: 'automatic',
    alias: { ...sdk.alias },
    // React's production build, as a user ships it; NODE_ENV is `test` inside vitest.
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'silent',
  });
  const copies = new Set(Object.keys(out.metafile.inputs).map((i) => SDK_COPY.exec(i)?.[1]).filter((c) => c !== undefined));
  if ([...copies].sort().join() !== [...sdk.copies].sort().join()) {
    throw new Error(`${sdk.name}: the bundle took the SDK from ${[...copies].join(', ')}, not ${sdk.copies.join(', ')}`);
  }
  return out.outputFiles[0].text;
}

const INDEX = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Chat</title><link rel="icon" href="data:,"></head>
<body><div id="root"></div><script type="module" src="page.js"></script></body></html>`;

/**
 * A server for the page built against `sdk`, on a port of its own: another origin than the
 * API's. `app`, when given, is the app's own chat route, mounted at `/api/chat`.
 */
export async function serveChatPage(sdk: Sdk, app?: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ origin: string }> {
  const script = await bundleChatPage(sdk);
  const server = createServer((req, res) => {
    if (app && /^\/api\/chat(\/|$)/.test(req.url ?? '')) return app(req, res);
    const [type, body] = req.url === '/' ? ['text/html', INDEX] : req.url === '/page.js' ? ['text/javascript', script] : [];
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': `${type}; charset=utf-8`, 'cache-control': 'no-store' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  track(server, () => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * What the page gets in its fragment: Baton's origin, a scope and a key to call Baton itself;
 * without them it calls the app's route of its own origin.
 */
export interface ChatSettings { baton?: string; scope?: string; key?: string; chat: string; agent: string; runtime: string }

/** A message as the page renders it. */
export interface ShownMessage {
  id: string;
  role: string;
  metadata: unknown;
  /** Its text parts, joined. */
  text: string;
  /** `tool`: a tool part's tool name; `input` and `output`: a tool part's, as JSON. */
  parts: { type: string; state: string | null; tool: string | null; call: string | null; input: string | null; output: string | null }[];
}

export interface ChatPage extends WatchedPage {
  /** Every response of a chat route the page got, in order, as `METHOD path status` (the path from its `/chat`). */
  responses: string[];
  messages(): Promise<ShownMessage[]>;
  /** useChat's status: `ready`, `submitted`, `streaming`, `error` (or `loading` before the history came). */
  status(): Promise<string>;
  send(text: string): Promise<void>;
  stop(): Promise<void>;
  approve(): Promise<void>;
  /** Waits until `check` holds for the shown messages; returns them. */
  until(check: (messages: ShownMessage[]) => boolean, what: string): Promise<ShownMessage[]>;
  /** Loads the page again, as a reload does. */
  reload(): Promise<void>;
}

/** Opens the page of `origin` in a new tab of `context`, with `settings`. */
export async function openChatPage(context: BrowserContext, origin: string, settings: ChatSettings): Promise<ChatPage> {
  const w = await openPage(context);
  const { page } = w;
  const responses: string[] = [];
  page.on('response', (r) => {
    const chatPath = /\/chat(\/.*)?$/.exec(new URL(r.url()).pathname);
    if (chatPath && r.request().method() !== 'OPTIONS') responses.push(`${r.request().method()} ${chatPath[0]} ${r.status()}`);
  });
  const given = Object.entries(settings).filter((e): e is [string, string] => e[1] !== undefined);
  const url = `${origin}/#${new URLSearchParams(given)}`;
  const byId = (id: string): Locator => page.getByTestId(id);
  /** The history came (or its failure, thrown with what the page said). */
  const loaded = async () => {
    const state = await waitFor(() => page.evaluate(() => {
      const error = document.querySelector('[data-testid="error"]')?.textContent;
      const status = document.querySelector('[data-testid="status"]')?.textContent;
      return error ? { error } : status && status !== 'loading' ? { status } : undefined;
    }), 20_000, 'the page to load its history');
    if ('error' in state) throw new Error(`the page failed: ${state.error}${w.errors.length ? `; ${w.errors.join(' | ')}` : ''}`);
  };
  await page.goto(url);
  await loaded();
  const messages = (): Promise<ShownMessage[]> => page.evaluate(() =>
    [...document.querySelectorAll('[data-testid="message"]')].map((m) => {
      const parts = [...m.querySelectorAll('[data-testid="part"]')].map((p) => ({
        type: p.getAttribute('data-type') ?? '',
        state: p.getAttribute('data-state'),
        tool: p.getAttribute('data-tool'),
        call: p.getAttribute('data-call'),
        input: p.querySelector('[data-testid="tool-input"]')?.textContent ?? null,
        output: p.querySelector('[data-testid="tool-output"]')?.textContent ?? null,
      }));
      const text = [...m.querySelectorAll('[data-testid="part"][data-type="text"]')].map((p) => p.textContent).join('');
      return { id: m.getAttribute('data-id') ?? '', role: m.getAttribute('data-role') ?? '', metadata: JSON.parse(m.getAttribute('data-metadata') ?? 'null'), text, parts };
    }));
  let last: ShownMessage[] = [];
  return {
    ...w,
    responses,
    messages,
    status: async () => (await byId('status').textContent()) ?? '',
    async send(text) {
      await byId('input').fill(text);
      await byId('send').click();
    },
    stop: () => byId('stop').click(),
    approve: () => byId('approve').click(),
    async until(check, what) {
      try {
        return await waitFor(async () => {
          last = await messages();
          return check(last) ? last : undefined;
        }, 30_000, what);
      } catch (err) {
        const errors = w.errors.length ? `; errors: ${w.errors.join(' | ')}` : '';
        throw new Error(`${(err as Error).message}; the page showed ${JSON.stringify(last)}${errors}`, { cause: err });
      }
    },
    async reload() {
      await page.reload();
      await loaded();
    },
  };
}
