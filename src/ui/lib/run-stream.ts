import { BatonClient, type RunStreamEvent } from '../../lib/client/client.ts';

export type { RunStreamEvent };

/**
 * How a followed stream is doing: connecting (first request), live (events flow),
 * reconnecting (the connection dropped; resuming after the last event id), ended (the run's
 * `end` arrived), failed (the API refused, e.g. 404, or stayed unreachable).
 */
export type StreamState =
  | { state: 'connecting' }
  | { state: 'live' }
  | { state: 'reconnecting'; after?: string }
  | { state: 'ended' }
  | { state: 'failed'; error: unknown };

export interface FollowOptions {
  /** Base URL of the API (what precedes `/v1`). */
  url: string;
  apiKey: string;
  scope: string;
  runId: string;
  /** Resume after this event id instead of reading the run from its first event. */
  after?: string;
  onEvent(e: RunStreamEvent): void;
  onState?(s: StreamState): void;
}

/**
 * Follows a run's events with fetch and a ReadableStream: an EventSource cannot send the
 * Authorization header, and a key must not travel in a URL. The typed client does the SSE
 * parsing, and resumes a dropped connection with Last-Event-ID, so every event arrives once,
 * in order. Returns a function that stops following (it never touches the run).
 */
export function followRun(o: FollowOptions): () => void {
  const ctrl = new AbortController();
  let calls = 0;
  let lastId = o.after;
  const report = (s: StreamState) => {
    if (!ctrl.signal.aborted) o.onState?.(s);
  };
  // The client's fetch, watched: each call after the first is a reconnect.
  const watched: typeof fetch = async (input, init) => {
    report(calls++ === 0 ? { state: 'connecting' } : { state: 'reconnecting', after: lastId });
    const res = await fetch(input, init);
    if (res.status === 200) report({ state: 'live' });
    return res;
  };
  const client = new BatonClient({ url: o.url, apiKey: o.apiKey, scope: o.scope, fetch: watched });
  void (async () => {
    try {
      for await (const e of client.stream(o.runId, { after: o.after, signal: ctrl.signal })) {
        lastId = e.id;
        if (ctrl.signal.aborted) return;
        o.onEvent(e);
      }
      report({ state: 'ended' });
    } catch (error) {
      report({ state: 'failed', error });
    }
  })();
  return () => ctrl.abort();
}
