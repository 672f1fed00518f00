import { beforeAll, describe, expect, it } from 'vitest';
import { BatonClient, type RunStreamEvent } from '../src/client.ts';
import { SseParser, type SseMessage } from '../src/lib/client/sse-parser.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { startSseProxy } from './helpers/sse-proxy.ts';
import { expectExactly, fullLog, words, type Seen } from './helpers/stream-check.ts';

/**
 * A submit that asks for `text/event-stream` is answered with the run's event stream: the
 * same events, each once, as GET …/runs/{runId}/events from the start, on the submit's own
 * connection. What a refused submit answers, and what it changes, is as for a JSON submit.
 */
let h: Harness;
let apiUrl: string;
let acme: ScopeClient;
let globex: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker();
  apiUrl = api.url;
  acme = await h.client(apiUrl, 'acme', 'client');
  globex = await h.client(apiUrl, 'globex', 'client');
});

/** POSTs a submit asking for the event stream and reads the answer to its end. */
async function submitStreaming(c: ScopeClient, body: Record<string, unknown>, base = apiUrl) {
  const res = await fetch(`${base}/v1/scopes/${c.scope}/runs`, {
    method: 'POST', body: JSON.stringify(body),
    headers: { ...c.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
  });
  const text = await res.text();
  const events: SseMessage[] = res.headers.get('content-type')?.startsWith('text/event-stream') ? new SseParser().push(text) : [];
  return { res, text, events };
}

const seen = (events: SseMessage[]): Seen[] =>
  events.filter((e) => e.id !== undefined).map((e) => ({ id: e.id!, type: e.event, data: JSON.parse(e.data) }));
const tokenText = (events: Seen[]) => events.flatMap((e) => (e.type === 'token' ? [(e.data as { text: string }).text] : [])).join('');

async function runsOfSession(c: ScopeClient, sessionId: string): Promise<unknown[]> {
  const page = await c.get(`/runs?sessionId=${sessionId}`);
  expect(page.status).toBe(200);
  return page.body.runs;
}

describe('submit with Accept: text/event-stream', () => {
  it('answers 202 with the run in Location and Baton-Run-Id, and streams every event of the run from queued to end', async () => {
    const content = words(30, 'ss');
    const { res, events } = await submitStreaming(acme, { sessionId: 'sub-stream', input: { content }, runtime: h.runtime });
    expect(res.status).toBe(202);
    const runId = res.headers.get('baton-run-id')!;
    expect(runId).toMatch(/^r/);
    expect(res.headers.get('location')).toBe(`/v1/scopes/acme/runs/${runId}`);
    const got = seen(events);
    expectExactly(got, await fullLog(h, 'acme', runId));
    expect(got[0]).toMatchObject({ type: 'status', data: { status: 'queued' } });
    expect(got.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded', result: { answer: content } } });
    expect(tokenText(got)).toBe(content);
    expect((await acme.get(`/runs/${runId}`)).body).toMatchObject({ id: runId, status: 'succeeded' });
  });

  it('an idempotent repeat streams the first run from its start (200); a refused submit is a JSON 4xx and makes nothing', async () => {
    const body = { sessionId: 'sub-stream-idem', input: { content: 'once only' }, runtime: h.runtime, idempotencyKey: 'ss-idem-1' };
    const first = await submitStreaming(acme, body);
    expect(first.res.status).toBe(202);
    const again = await submitStreaming(acme, body);
    expect(again.res.status).toBe(200);
    const runId = first.res.headers.get('baton-run-id')!;
    expect(again.res.headers.get('baton-run-id')).toBe(runId);
    expect(seen(again.events)).toEqual(seen(first.events));
    expect(await runsOfSession(acme, 'sub-stream-idem')).toHaveLength(1);

    // Bad input, a stream token asked of a submit that streams, another scope's key: refused as JSON, nothing made.
    const refusals = [
      await submitStreaming(acme, { sessionId: 'sub-stream-bad', input: {}, runtime: h.runtime }),
      await submitStreaming(acme, { sessionId: 'sub-stream-bad', input: { content: 'x' }, runtime: h.runtime, streamToken: true }),
      await submitStreaming({ ...globex, scope: 'acme' }, { sessionId: 'sub-stream-bad', input: { content: 'x' }, runtime: h.runtime }),
    ];
    expect(refusals.map((r) => r.res.status)).toEqual([400, 400, 404]);
    for (const r of refusals) {
      expect(r.res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(JSON.parse(r.text).error.code).toMatch(/^[A-Z_]+$/);
      expect(r.res.headers.get('baton-run-id')).toBeNull();
    }
    expect(JSON.parse(refusals[1].text).error.details).toEqual([{ path: 'body.streamToken', message: expect.any(String) }]);
    expect(await runsOfSession(acme, 'sub-stream-bad')).toEqual([]);
  });

  it('past the key\'s stream cap it is 429 TOO_MANY_STREAMS before the run is made', async () => {
    const capped = await h.startApi({ SSE_MAX_PER_KEY: '1' });
    const c = await h.client(capped.url, 'acme', 'client');
    // A run no worker serves keeps its stream (the key's one) open.
    const idle = await c.submit('sub-stream-cap-idle', 'wait', { runtime: `${h.runtime}-none` });
    const open = await fetch(`${capped.url}/v1/scopes/acme/runs/${idle.body.id}/events`, { headers: { ...c.headers, accept: 'text/event-stream' } });
    expect(open.status).toBe(200);
    const refused = await submitStreaming(c, { sessionId: 'sub-stream-cap', input: { content: 'x' }, runtime: h.runtime }, capped.url);
    expect(refused.res.status).toBe(429);
    expect(JSON.parse(refused.text).error.code).toBe('TOO_MANY_STREAMS');
    expect(await runsOfSession(c, 'sub-stream-cap')).toEqual([]);
    await open.body!.cancel();
    await c.post(`/runs/${idle.body.id}/cancel`, {});
  });

  it('the typed client\'s submitAndStream() resumes through connections cut after every k events: each event once', async () => {
    const proxy = await startSseProxy(apiUrl, { cutAfterEvents: () => 1 + Math.floor(Math.random() * 5) });
    const client = new BatonClient({ url: proxy.url, apiKey: acme.key, scope: 'acme' });
    const content = words(300, 'sc');
    const { runId, created, warnings, events } = await client.submitAndStream({
      sessionId: 'sub-stream-client', input: { content }, runtime: h.runtime, metadata: { delayMs: 1 },
    });
    expect(created).toBe(true);
    expect(warnings).toEqual([]);
    const got: RunStreamEvent[] = [];
    for await (const e of events) got.push(e);
    const asSeen = got.map((e) => ({ id: e.id, type: e.type, data: e.data }));
    expectExactly(asSeen, await fullLog(h, 'acme', runId));
    expect(tokenText(asSeen)).toBe(content);
    expect(proxy.cuts).toBeGreaterThan(3);
    // The first connection was the submit; the others resumed the run's stream by id.
    expect(proxy.requests[0].method).toBe('POST');
    expect(proxy.requests.slice(1).every((r) => r.method === 'GET' && r.lastEventId !== undefined)).toBe(true);
  });
});
