/**
 * How the client sends a request: the part of fetch it uses, over fetch (browsers, Deno, Bun,
 * edge runtimes, or a fetch the caller passes) or over Node's own http module. In Node the
 * http module is the default: fetch's request and body machinery costs a few tenths of a
 * millisecond per request and per event received, which is most of what a submit that
 * streams its first token takes on a local network (`npm run bench`, time to first token).
 *
 * Nothing here imports a Node module: the Node transport takes http and https from
 * process.getBuiltinModule (Node 20.16 and later) when the client is made, so the client
 * still bundles for a browser with no Node built-in in it.
 */

/** What the client reads of an answer. */
export interface Answer {
  readonly status: number;
  header(name: string): string | null;
  /** The body as it arrives; throws when the connection breaks or the request's signal aborts. */
  chunks(): AsyncIterable<Uint8Array>;
  text(): Promise<string>;
  /**
   * Stops reading: a body not read to its end closes its connection. Resolves once the
   * connection is free for the next request (at once over fetch, whose pool sees to it).
   */
  cancel(): Promise<void>;
}

export interface Request {
  method: string;
  headers: Record<string, string>;
  body?: string;
  /** Aborting it rejects the request, or breaks off the body being read, with its reason. */
  signal?: AbortSignal;
}

export type Send = (url: string, req: Request) => Promise<Answer>;

/** Sends with `f`, called as a plain function: a browser's fetch refuses to be a method of another object. */
export function sendWithFetch(f: typeof fetch): Send {
  return async (url, req) => {
    const res = await f(url, { method: req.method, headers: req.headers, body: req.body, signal: req.signal });
    return {
      status: res.status,
      header: (name) => res.headers.get(name),
      chunks: () => readerChunks(res.body),
      text: () => res.text(),
      cancel: async () => void res.body?.cancel().catch(() => {}),
    };
  };
}

/** A ReadableStream as an async iterable (not every browser iterates one itself). */
async function* readerChunks(body: ReadableStream<Uint8Array> | null): AsyncGenerator<Uint8Array> {
  if (!body) return;
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.releaseLock();
  }
}

/** The few members of Node's http and https modules the Node transport uses. */
interface NodeHttp {
  request(url: URL, options: { method: string; headers: Record<string, string> }, onAnswer: (res: NodeAnswer) => void): NodeRequest;
}
interface NodeRequest {
  on(event: 'error', listener: (err: Error) => void): void;
  end(body?: string): void;
  destroy(err?: Error): void;
}
interface NodeAnswer extends AsyncIterable<Uint8Array> {
  statusCode?: number;
  headers: Record<string, string | string[] | undefined>;
  /** The whole answer arrived (what is left to read is in memory). */
  complete: boolean;
  iterator(o: { destroyOnReturn: boolean }): AsyncIterable<Uint8Array>;
  destroy(err?: Error): void;
  resume(): void;
  readableEnded: boolean;
  destroyed: boolean;
  on(event: 'error', listener: (err: Error) => void): void;
  once(event: 'end' | 'close', listener: () => void): void;
}

type GetBuiltin = (id: string) => unknown;
interface Host {
  process?: { getBuiltinModule?: GetBuiltin; release?: { name?: string } };
  navigator?: { userAgent?: string };
}

/**
 * Sends with Node's http and https modules (their global agents, which keep connections alive
 * since Node 19), or undefined where there are none to take: not Node.js, or a Node before
 * 20.16. Runtimes that offer Node's modules too (Bun, Deno, Cloudflare's workerd) keep their
 * own fetch: they name themselves in navigator.userAgent, which Node.js fills in from 21 on.
 */
export function sendWithNodeHttp(): Send | undefined {
  const host = globalThis as Host;
  const agent = host.navigator?.userAgent;
  if (agent !== undefined ? !agent.startsWith('Node.js/') : host.process?.release?.name !== 'node') return undefined;
  const getBuiltin = host.process?.getBuiltinModule;
  if (typeof getBuiltin !== 'function') return undefined;
  const http = getBuiltin('node:http') as NodeHttp | undefined;
  const https = getBuiltin('node:https') as NodeHttp | undefined;
  if (!http || !https) return undefined;
  return (url, req) => {
    const target = new URL(url);
    const module = target.protocol === 'https:' ? https : http;
    const { signal } = req;
    return new Promise<Answer>((resolve, reject) => {
      signal?.throwIfAborted();
      let answer: NodeAnswer | undefined;
      const onAbort = () => {
        // Before the answer: the request fails with the signal's reason, as fetch's does; after
        // it, the body breaks off with it.
        request.destroy(signal!.reason as Error);
        answer?.destroy(signal!.reason as Error);
        reject(signal!.reason);
      };
      const request = module.request(target, { method: req.method, headers: req.headers }, (res) => {
        answer = res;
        // An error of the body shows in its reading; this listener only keeps it from being unhandled.
        res.on('error', () => {});
        resolve(nodeAnswer(res, () => signal?.removeEventListener('abort', onAbort)));
      });
      request.on('error', (err) => {
        signal?.removeEventListener('abort', onAbort);
        reject(err);
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      request.end(req.body);
    });
  };
}

function nodeAnswer(res: NodeAnswer, done: () => void): Answer {
  return {
    status: res.statusCode ?? 0,
    header(name) {
      const v = res.headers[name.toLowerCase()];
      return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
    },
    async *chunks() {
      try {
        // Stopping early leaves the answer to cancel(), which keeps its connection when it can.
        yield* res.iterator({ destroyOnReturn: false });
      } finally {
        done();
      }
    },
    async text() {
      const decoder = new TextDecoder();
      let text = '';
      try {
        for await (const chunk of res) text += decoder.decode(chunk, { stream: true });
        return text + decoder.decode();
      } finally {
        done();
      }
    },
    async cancel() {
      done();
      if (!res.complete) return res.destroy();
      // All of it arrived (a stream read up to its `end` event, say): read out the rest, and
      // resolve once the connection went back to the agent, so the caller's next request
      // finds it there (the answer's end frees it a tick later).
      if (res.readableEnded || res.destroyed) return;
      await new Promise<void>((resolve) => {
        res.once('end', resolve);
        res.once('close', resolve);
        res.resume();
      });
    },
  };
}
