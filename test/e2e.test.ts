import { describe, expect, it, beforeAll } from 'vitest';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker();
  acme = await h.client(api.url, 'acme', 'client');
});

describe('a run end to end', () => {
  it('streams the echo tokens over SSE and finishes succeeded', async () => {
    const content = 'the quick brown fox jumps over the lazy dog';
    const sub = await acme.submit('chat-1', content, { metadata: { delayMs: 5 } });
    expect(sub.status).toBe(202);
    expect(sub.body).toMatchObject({ status: 'queued', sessionId: 'chat-1', runtime: h.runtime, agent: 'echo' });
    expect(sub.body.links.events).toBe(`/v1/scopes/acme/runs/${sub.body.id}/events`);

    const sse = await acme.sse(`/runs/${sub.body.id}/events`);
    expect(sse.ended).toBe(true);
    expect(tokenText(sse.events)).toBe(content);
    expect(sse.events.filter((e) => e.event === 'token').length).toBeGreaterThan(1);
    const types = sse.events.map((e) => e.event);
    expect(types[0]).toBe('status');
    expect(types.at(-1)).toBe('end');
    expect(sse.events.at(-1)!.data).toEqual({
      status: 'succeeded', result: { answer: content, finishReason: 'stop', toolCallsSeen: 0 },
    });
    const ids = sse.events.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);

    const got = await acme.get(`/runs/${sub.body.id}`);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: content } });
    expect(got.body.finishedAt).toBeTypeOf('string');

    const msgs = await acme.get('/sessions/chat-1/messages');
    expect(msgs.body.messages.map((m: any) => [m.role, m.content])).toEqual([['user', content], ['assistant', content]]);
  });

  it('answers 404 for an unknown run and its events', async () => {
    expect((await acme.get('/runs/nope')).body.error.code).toBe('RUN_NOT_FOUND');
    expect((await acme.sse('/runs/nope/events')).status).toBe(404);
  });

  it('a late reader of a finished run gets the whole stream, or the part after its id', async () => {
    const sub = await acme.submit('late', 'a b c d');
    await acme.waitStatus(sub.body.id, ['succeeded']);
    const sse = await acme.sse(`/runs/${sub.body.id}/events`);
    expect(tokenText(sse.events)).toBe('a b c d');
    const mid = sse.events[2].id;
    const rest = await acme.sse(`/runs/${sub.body.id}/events`, { lastEventId: mid });
    expect(rest.events.map((e) => e.id)).toEqual(sse.events.slice(3).map((e) => e.id));
  });
});
