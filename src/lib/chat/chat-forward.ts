import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';

/** Where an app's chat route forwards to, and what it decides for the page. */
export interface BatonChatOptions {
  /** Baton's API (`https://baton.internal:3000`). */
  url: string;
  scope: string;
  /** A client key of the scope: it stays on the app's server, the page never sees it. */
  apiKey: string;
  /** The agent and runtime every turn runs with; set here, a page cannot choose another. */
  agent?: string;
  runtime?: string;
  /** Metadata added to every turn (the app's user id, say), over what the page sent. */
  metadata?(request: Request): Record<string, unknown> | undefined | Promise<Record<string, unknown> | undefined>;
  /**
   * Whether this request may use chat `chatId` (the session): the app's own check, by its own
   * login. Without it any page of the app may read and write any chat of the scope.
   */
  authorize?(request: Request, chatId: string): boolean | Promise<boolean>;
  fetch?: typeof fetch;
}

export interface BatonChatHandlers {
  /**
   * A fetch-style handler (a Next.js route handler, Hono, a Worker) for every chat route under
   * the app's path: POST …/chat, GET …/chat/{id}/stream, GET …/chat/{id}/messages, POST
   * …/chat/{id}/stop. Mount it on a catch-all path: `app/api/chat/[[...path]]/route.ts`
   * exporting `GET` and `POST`.
   */
  GET(request: Request): Promise<Response>;
  POST(request: Request): Promise<Response>;
  /** The same for Express (or any Node `http` server): `app.use('/api/chat', chat.node)`. */
  node(req: IncomingMessage, res: ServerResponse): void;
}

/** The answer headers a page reads (the stream's, and how to cache the answer). */
const PASSED_HEADERS = ['content-type', 'cache-control', 'x-vercel-ai-ui-message-stream', 'baton-run-id'];

/** `<chatId>/<action>` at the end of a path, the chat routes' shape below the app's mount. */
const CHAT_PATH = /\/([A-Za-z0-9][A-Za-z0-9._-]{0,63})\/(stream|messages|stop)\/?$/;

/**
 * An app's own chat route, forwarding the AI SDK's `DefaultChatTransport` to Baton's chat
 * routes with the app's key: the page points `api` at the app (`/api/chat`) and holds no key.
 * The POST body goes on as the page sent it, with the agent, runtime and metadata the app set
 * here; the answer comes back as Baton streams it (the UI message stream, untouched). A page
 * that goes away closes the forwarded request, which never stops the turn (POST …/stop does).
 */
export function batonChat(o: BatonChatOptions): BatonChatHandlers {
  const doFetch = o.fetch ?? fetch;
  const base = `${o.url.replace(/\/+$/, '')}/v1/scopes/${encodeURIComponent(o.scope)}/chat`;

  async function forward(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const named = CHAT_PATH.exec(url.pathname);
    const headers: Record<string, string> = { authorization: `Bearer ${o.apiKey}` };
    let target = base;
    let body: string | undefined;
    let chatId: string;
    if (named && !(request.method === 'POST' && named[2] !== 'stop')) {
      chatId = named[1];
      target = `${base}/${chatId}/${named[2]}${named[2] === 'messages' ? url.search : ''}`;
      const lastEventId = request.headers.get('last-event-id');
      if (lastEventId) headers['last-event-id'] = lastEventId;
    } else if (request.method === 'POST') {
      const sent = await readJson(request);
      if (!sent) return refuse(400, 'the body must be a JSON object');
      chatId = typeof sent.id === 'string' ? sent.id : '';
      const extra = await o.metadata?.(request);
      const metadata = extra ? { ...(isObject(sent.metadata) ? sent.metadata : {}), ...extra } : sent.metadata;
      body = JSON.stringify({
        ...sent, ...(o.agent ? { agent: o.agent } : {}), ...(o.runtime ? { runtime: o.runtime } : {}), ...(metadata ? { metadata } : {}),
      });
      headers['content-type'] = 'application/json';
    } else {
      return refuse(404, 'not a chat route');
    }
    if (o.authorize && !(await o.authorize(request, chatId))) return refuse(403, 'this chat is not yours');
    const upstream = await doFetch(target, { method: request.method, headers, body, signal: request.signal });
    const out = new Headers();
    for (const name of PASSED_HEADERS) {
      const value = upstream.headers.get(name);
      if (value !== null) out.set(name, value);
    }
    return new Response(upstream.body, { status: upstream.status, headers: out });
  }

  return {
    GET: forward,
    POST: forward,
    node(req, res) {
      void forward(toRequest(req, res)).then((answer) => send(answer, res), (err: unknown) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { code: 'UPSTREAM_FAILED', message: err instanceof Error ? err.message : String(err) } }));
      });
    },
  };
}

async function readJson(request: Request): Promise<Record<string, unknown> | undefined> {
  try {
    const value = (await request.json()) as unknown;
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function refuse(status: number, message: string): Response {
  return Response.json({ error: { code: status === 403 ? 'FORBIDDEN' : status === 404 ? 'NOT_FOUND' : 'VALIDATION_FAILED', message } }, { status });
}

/** A Node request as a fetch Request, aborted when the client goes away. */
function toRequest(req: IncomingMessage, res: ServerResponse): Request {
  const gone = new AbortController();
  res.once('close', () => gone.abort());
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
  // Express strips its mount path from req.url; originalUrl keeps it (either way the chat path is at its end).
  const path = (req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url ?? '/';
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  return new Request(new URL(path, 'http://app.local'), {
    method: req.method, headers, signal: gone.signal,
    ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
  } as RequestInit);
}

async function send(answer: Response, res: ServerResponse): Promise<void> {
  res.writeHead(answer.status, Object.fromEntries(answer.headers));
  res.flushHeaders();
  if (!answer.body) return void res.end();
  const body = Readable.fromWeb(answer.body as import('node:stream/web').ReadableStream<Uint8Array>);
  res.once('close', () => body.destroy());
  body.pipe(res);
}
