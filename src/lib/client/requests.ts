import { sendWithFetch, sendWithNodeHttp, type Answer, type Send } from './transport.ts';
import { apiError } from './errors.ts';

/** `fetch` when the caller gave one, else Node's http module where there is one, else the global fetch. */
export function defaultSend(f: typeof fetch | undefined): Send {
  if (f) return sendWithFetch(f);
  // Looked up at each request, called as a plain function (see sendWithFetch).
  return sendWithNodeHttp() ?? sendWithFetch((input, init) => globalThis.fetch(input, init));
}

/** Whether an answer is 2xx. */
export const ok = (res: Answer) => res.status >= 200 && res.status < 300;

/** `?limit=…&cursor=…` of a listing page, or nothing when neither is given. */
export function pageQuery(opts: { limit?: number; cursor?: string }): string {
  const q = new URLSearchParams();
  if (opts.limit !== undefined) q.set('limit', String(opts.limit));
  if (opts.cursor !== undefined) q.set('cursor', opts.cursor);
  return q.size ? `?${q}` : '';
}

/** A JSON request and its JSON answer; BatonApiError for anything but 2xx. */
export async function jsonRequest<T>(send: Send, url: string, method: string, headers: Record<string, string>, body?: unknown): Promise<T> {
  const res = await send(url, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!ok(res)) throw await apiError(res);
  return JSON.parse(await res.text()) as T;
}
