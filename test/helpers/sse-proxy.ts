import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { track } from './resources.ts';

/**
 * A small HTTP reverse proxy for stream tests, standing in for a load balancer: it forwards
 * to `target` (which a test may switch, as an LB does when a backend dies) and can cut an
 * event stream after a number of complete events, as a flaky network or proxy would.
 */
export interface SseProxy {
  url: string;
  target: string;
  /** Requests forwarded per target. */
  served: Map<string, number>;
  /** Streams this proxy cut on purpose. */
  cuts: number;
  /** Each forwarded request: its target and the Last-Event-ID it carried (a reconnecting reader's). */
  requests: { target: string; method: string; lastEventId?: string }[];
  close(): Promise<void>;
}

export async function startSseProxy(
  target: string,
  opts: { cutAfterEvents?: () => number | undefined } = {},
): Promise<SseProxy> {
  const proxy: SseProxy = { url: '', target, served: new Map(), cuts: 0, requests: [], close: async () => {} };
  const server = createServer((req, res) => {
    const to = proxy.target;
    proxy.served.set(to, (proxy.served.get(to) ?? 0) + 1);
    const lastEventId = req.headers['last-event-id'];
    proxy.requests.push({ target: to, method: req.method ?? 'GET', ...(typeof lastEventId === 'string' ? { lastEventId } : {}) });
    const up = request(to + req.url, { method: req.method, headers: req.headers }, (upRes: IncomingMessage) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      // The backend died mid-response: drop the client's connection too, as a load balancer does.
      upRes.on('close', () => { if (!upRes.complete) res.destroy(); });
      const limit = upRes.headers['content-type']?.startsWith('text/event-stream') ? opts.cutAfterEvents?.() : undefined;
      if (limit === undefined) return void upRes.pipe(res);
      let seen = 0;
      let cut = false;
      let block = '';
      upRes.setEncoding('utf8');
      upRes.on('data', (chunk: string) => {
        if (cut) return;
        // Forward whole event blocks only, and stop right after the limit-th event.
        let out = '';
        block += chunk;
        let idx: number;
        while ((idx = block.indexOf('\n\n')) >= 0) {
          const one = block.slice(0, idx + 2);
          block = block.slice(idx + 2);
          out += one;
          if (/^id: /m.test(one) && ++seen >= limit) {
            cut = true;
            proxy.cuts++;
            upRes.destroy();
            // Drop the connection abruptly, but only once these bytes reached the socket.
            res.write(out, () => res.destroy());
            return;
          }
        }
        if (out) res.write(out);
      });
      // A response that ended upstream may still emit 'end' after the cut: ignore it then.
      upRes.on('end', () => { if (!cut) res.end(block); });
      upRes.on('error', () => res.destroy());
    });
    up.on('error', () => {
      if (res.headersSent) res.destroy();
      else res.writeHead(502, { 'content-type': 'text/plain' }).end('backend unreachable');
    });
    res.on('close', () => up.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let closing: Promise<void> | undefined;
  proxy.close = () => {
    closing ??= new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
    return closing;
  };
  return track(proxy, proxy.close);
}
