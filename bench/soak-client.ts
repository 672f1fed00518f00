/**
 * The soak's HTTP side: JSON calls and an SSE reader on Node's fetch, written for a world
 * where the API process at the other end may be SIGKILLed mid-request. Every call has a
 * deadline, and every failure is an answer the caller handles, not a crash.
 */

// The soak reads many shapes of JSON body and event data; each read checks what it needs.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export interface Reply { status: number; body: any }

/** A JSON call; `status` 0 means the request never got an answer (connection refused, reset, timeout). */
export async function jsonCall(
  url: string, method: string, headers: Record<string, string>, body?: unknown, timeoutMs = 10_000,
): Promise<Reply> {
  const init: RequestInit = { method, headers: { ...headers }, signal: AbortSignal.timeout(timeoutMs) };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] = 'application/json';
  }
  try {
    const res = await fetch(url, init);
    const text = await res.text();
    let parsed: unknown;
    try { parsed = text ? JSON.parse(text) : undefined; } catch { parsed = text; }
    return { status: res.status, body: parsed };
  } catch (err) {
    return { status: 0, body: { error: { code: 'NETWORK', message: (err as Error).message } } };
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export interface StreamEvent { id: string; type: string; data: any }

export interface SseRead {
  /** HTTP status; 0 when the connection failed before an answer. */
  status: number;
  /** The stream reached its `end` event. */
  ended: boolean;
  /** The reader dropped the connection itself after `dropAfter` events. */
  dropped: boolean;
}

/**
 * Reads a run's event stream from `afterId`, handing each event to `onEvent`, until the
 * `end` event, until `dropAfter` events (then it hangs up, as a flaky mobile client does),
 * until the server goes away, or until `signal` aborts.
 */
export async function readStream(
  url: string,
  headers: Record<string, string>,
  opts: { afterId?: string; dropAfter?: number; signal: AbortSignal; onEvent(e: StreamEvent): void },
): Promise<SseRead> {
  const ctrl = new AbortController();
  const onAbort = () => ctrl.abort();
  opts.signal.addEventListener('abort', onAbort, { once: true });
  const h: Record<string, string> = { ...headers, accept: 'text/event-stream' };
  if (opts.afterId) h['last-event-id'] = opts.afterId;
  let seen = 0;
  /** Decided before leaving the body loop: should closing the body throw, the outcome stands. */
  let outcome: SseRead | undefined;
  try {
    // A connect that hangs (a stopped process) must not hang the reader.
    const connectTimer = setTimeout(() => ctrl.abort(), 10_000);
    let res: Response;
    try {
      res = await fetch(url, { headers: h, signal: ctrl.signal });
    } finally {
      clearTimeout(connectTimer);
    }
    if (res.status !== 200 || !res.body) {
      await res.text().catch(() => {});
      return { status: res.status, ended: false, dropped: false };
    }
    const decoder = new TextDecoder();
    let buf = '';
    // Leaving the loop cancels the body; the abort in `finally` then only ends the request.
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let cut: number;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const e = parseBlock(block);
        if (!e) continue;
        opts.onEvent(e);
        seen++;
        if (e.type === 'end') return (outcome = { status: 200, ended: true, dropped: false });
        if (opts.dropAfter !== undefined && seen >= opts.dropAfter) return (outcome = { status: 200, ended: false, dropped: true });
      }
    }
    return { status: 200, ended: false, dropped: false };
  } catch {
    return outcome ?? { status: 0, ended: false, dropped: false };
  } finally {
    opts.signal.removeEventListener('abort', onAbort);
    ctrl.abort();
  }
}

/** One SSE block; comments (keep-alives) and the `retry:` hint carry no event. */
function parseBlock(block: string): StreamEvent | undefined {
  let id = '';
  let type = '';
  let data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('id: ')) id = line.slice(4);
    else if (line.startsWith('event: ')) type = line.slice(7);
    else if (line.startsWith('data: ')) data += line.slice(6);
  }
  if (!type || !id) return undefined;
  return { id, type, data: JSON.parse(data) };
}
