/** Small HTTP helpers for tests: JSON calls and an SSE reader on Node's fetch. */

export interface JsonResponse<T = any> { status: number; headers: Headers; body: T }

export async function call<T = any>(
  base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {},
): Promise<JsonResponse<T>> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
  }
  const res = await fetch(base + path, init);
  const text = await res.text();
  let parsed: unknown = text;
  try { parsed = text ? JSON.parse(text) : undefined; } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, body: parsed as T };
}

export interface SseEvent { id: string; event: string; data: any }

/**
 * Reads an SSE response until it ends, `stopAfter` events arrived (then drops the
 * connection, as a flaky client would), or `signal` aborts.
 */
export async function readSse(
  url: string,
  opts: { lastEventId?: string; stopAfter?: number; headers?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<{ status: number; events: SseEvent[]; ended: boolean }> {
  const ctrl = new AbortController();
  opts.signal?.addEventListener('abort', () => ctrl.abort(), { once: true });
  const headers: Record<string, string> = { accept: 'text/event-stream', ...opts.headers };
  if (opts.lastEventId) headers['last-event-id'] = opts.lastEventId;
  const res = await fetch(url, { headers, signal: ctrl.signal });
  const events: SseEvent[] = [];
  if (res.status !== 200 || !res.body) {
    await res.text().catch(() => {});
    return { status: res.status, events, ended: false };
  }
  const decoder = new TextDecoder();
  let buf = '';
  let ended = false;
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let idx: number;
      while ((idx = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        const e: Partial<SseEvent> = {};
        let data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('id: ')) e.id = line.slice(4);
          else if (line.startsWith('event: ')) e.event = line.slice(7);
          else if (line.startsWith('data: ')) data += line.slice(6);
        }
        if (!e.event) continue;
        events.push({ id: e.id!, event: e.event, data: JSON.parse(data) });
        if (opts.stopAfter !== undefined && events.length >= opts.stopAfter) {
          ctrl.abort();
          return { status: 200, events, ended: false };
        }
      }
    }
    ended = true;
  } catch (err) {
    if (!ctrl.signal.aborted) throw err;
  }
  return { status: res.status, events, ended };
}

export const tokenText = (events: SseEvent[]) =>
  events.filter((e) => e.event === 'token').map((e) => e.data.text).join('');
