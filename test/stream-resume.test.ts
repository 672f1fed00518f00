import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText, type SseEvent } from './helpers/http.ts';
import { expectExactly, expectIncreasing, fullLog, seen, words } from './helpers/stream-check.ts';

let h: Harness;
let acme: ScopeClient;
let apiUrl: string;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker();
  apiUrl = api.url;
  acme = await h.client(api.url, 'acme', 'client');
});

describe('resumable streams', () => {
  it('reconnect storm: a reader dropping after every k events (k random 1..10) gets all 2,000 tokens exactly once', async () => {
    const content = words(2000);
    const sub = await acme.submit('storm', content, { metadata: { delayMs: 1 } });
    expect(sub.status).toBe(202);
    const runId = sub.body.id as string;
    const got: SseEvent[] = [];
    let after: string | undefined;
    let connections = 0;
    const t0 = Date.now();
    for (;;) {
      const k = 1 + Math.floor(Math.random() * 10);
      const r = await acme.sse(`/runs/${runId}/events`, { lastEventId: after, stopAfter: k });
      connections++;
      expect(r.status).toBe(200);
      got.push(...r.events);
      if (r.events.length) after = r.events.at(-1)!.id;
      if (r.events.at(-1)?.event === 'end') break;
      if (connections > 10_000) throw new Error('the stream never ended');
    }
    const tokens = got.filter((e) => e.event === 'token');
    console.log(`reconnect storm: ${connections} connections, ${got.length} events (${tokens.length} token events for 2000 tokens) in ${Date.now() - t0} ms`);
    expect(tokenText(got)).toBe(content);
    const ids = got.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expectIncreasing(ids);
    expect(got.at(-1)!.data).toMatchObject({ status: 'succeeded', result: { answer: content } });
    expectExactly(seen(got), await fullLog(h, 'acme', runId));
    expect(connections).toBeGreaterThan(10);
  });

  it('late join: a reader of a finished run gets the whole stream, or exactly what follows its id', async () => {
    const content = words(50, 'late');
    const sub = await acme.submit('late', content);
    await acme.waitStatus(sub.body.id, ['succeeded']);
    const log = await fullLog(h, 'acme', sub.body.id);
    const all = await acme.sse(`/runs/${sub.body.id}/events`);
    expect(all.ended).toBe(true);
    expectExactly(seen(all.events), log);
    expect(tokenText(all.events)).toBe(content);
    for (const at of [0, 3, log.length - 2]) {
      const rest = await acme.sse(`/runs/${sub.body.id}/events`, { lastEventId: log[at].id });
      expectExactly(seen(rest.events), log, log[at].id);
      const q = await acme.sse(`/runs/${sub.body.id}/events?after=${log[at].id}`);
      expectExactly(seen(q.events), log, log[at].id);
    }
    // A reader that already has `end` is told there is nothing more (EventSource stops on 204).
    const done = await acme.sse(`/runs/${sub.body.id}/events`, { lastEventId: log.at(-1)!.id });
    expect(done.status).toBe(204);
  });

  it('late join mid-run: from the start without Last-Event-ID, from its id with one', async () => {
    const content = words(300, 'mid');
    const sub = await acme.submit('mid', content, { metadata: { delayMs: 5 } });
    const runId = sub.body.id as string;
    const key = h.keys.scope('acme').events(runId);
    // Join once tokens are flowing: a good part of the answer was produced before we came.
    await waitFor(async () => (await h.redis.xlen(key)) >= 8, 20_000, 'tokens to flow');
    const early = await acme.sse(`/runs/${runId}/events`, { stopAfter: 6 });
    const fromId = early.events.at(-1)!.id;
    const [fromStart, fromMiddle] = await Promise.all([
      acme.sse(`/runs/${runId}/events`),
      acme.sse(`/runs/${runId}/events`, { lastEventId: fromId }),
    ]);
    const run = await acme.get(`/runs/${runId}`);
    expect(run.body.status).toBe('succeeded');
    const log = await fullLog(h, 'acme', runId);
    expectExactly(seen(fromStart.events), log);
    expectExactly(seen(fromMiddle.events), log, fromId);
    expect(tokenText(fromStart.events)).toBe(content);
    expect(tokenText([...early.events, ...fromMiddle.events])).toBe(content);
  });

  it('a reader that disconnects does not affect the run', async () => {
    const content = words(200, 'gone');
    const sub = await acme.submit('gone', content, { metadata: { delayMs: 2 } });
    const part = await acme.sse(`/runs/${sub.body.id}/events`, { stopAfter: 4 });
    expect(part.events).toHaveLength(4);
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'cancelled']);
    expect(run.status).toBe('succeeded');
    expect(run.result.answer).toBe(content);
  });

  it('an unknown run, or one of another scope, answers 404 on its stream', async () => {
    const sub = await acme.submit('mine', 'only mine');
    await acme.waitStatus(sub.body.id, ['succeeded']);
    expect((await acme.sse('/runs/nope/events')).status).toBe(404);
    const other = await h.client(apiUrl, 'other', 'client');
    const foreign = await other.sse(`/runs/${sub.body.id}/events`);
    expect(foreign.status).toBe(404);
    expect(foreign.events).toEqual([]);
  });
});
