import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { openGate, sessionAgents } from './fixtures/session-agents.ts';

/** Invariant 2: one active run per session, in submission order; multitask reject and interrupt. */
let h: Harness;
let apiUrl: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  apiUrl = (await h.startApi()).url;
  await h.startWorker({ agents: sessionAgents });
  acme = await h.client(apiUrl, 'acme', 'client');
});

const history = async (sessionId: string) =>
  (await acme.get(`/sessions/${sessionId}/messages?limit=500`)).body.messages as any[];

/** At most one run of the session held the session at any time: each started after the previous one finished. */
function expectOneAtATime(runs: any[]): void {
  const sorted = [...runs].sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt));
  for (let i = 1; i < sorted.length; i++) {
    expect(Date.parse(sorted[i].startedAt)).toBeGreaterThanOrEqual(Date.parse(sorted[i - 1].finishedAt));
  }
}

describe('one active run per session, FIFO', () => {
  it('10 runs submitted back to back run one at a time, and the history alternates in submission order', async () => {
    const contents = Array.from({ length: 10 }, (_, i) => `turn ${i} of the burst`);
    const ids: string[] = [];
    for (const c of contents) {
      const sub = await acme.submit('burst', c, { metadata: { delayMs: 5 } });
      expect(sub.status).toBe(202);
      ids.push(sub.body.id);
    }
    const runs = await Promise.all(ids.map((id) => acme.waitStatus(id, ['succeeded'], 30_000)));
    expectOneAtATime(runs);
    const startOrder = [...runs].sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt)).map((r) => r.id);
    expect(startOrder).toEqual(ids);

    const msgs = await history('burst');
    expect(msgs.map((m) => m.role)).toEqual(contents.flatMap(() => ['user', 'assistant']));
    expect(msgs.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(contents);
    expect(msgs.filter((m) => m.role === 'assistant').map((m) => m.content)).toEqual(contents);
    expect(msgs.map((m) => m.runId)).toEqual(ids.flatMap((id) => [id, id]));
    expect(msgs.some((m) => m.incomplete)).toBe(false);
  });

  it('10 runs submitted concurrently: the history alternates user/answer in the order the runs were accepted', async () => {
    const contents = Array.from({ length: 10 }, (_, i) => `parallel ${i}`);
    const subs = await Promise.all(contents.map((c) => acme.submit('parallel', c)));
    expect(subs.map((s) => s.status)).toEqual(contents.map(() => 202));
    const runs = await Promise.all(subs.map((s) => acme.waitStatus(s.body.id, ['succeeded'], 30_000)));
    expectOneAtATime(runs);
    const msgs = await history('parallel');
    expect(msgs).toHaveLength(20);
    for (let i = 0; i < 20; i += 2) {
      expect([msgs[i].role, msgs[i + 1].role]).toEqual(['user', 'assistant']);
      expect(msgs[i + 1].content).toBe(msgs[i].content);
      expect(msgs[i + 1].runId).toBe(msgs[i].runId);
    }
    // Accepted order = the order the session started them = the history's order.
    const byStart = [...runs].sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt)).map((r) => r.id);
    expect(msgs.filter((m) => m.role === 'user').map((m) => m.runId)).toEqual(byStart);
    expect(new Set(byStart)).toEqual(new Set(subs.map((s) => s.body.id)));
  });
});

describe('multitask', () => {
  /** Resolves once the run has streamed its first token. */
  const firstToken = (runId: string) => waitFor(async () => {
    const events = await h.redis.xrange(h.keys.scope('acme').events(runId), '-', '+');
    return events.some(([, fields]) => fields[1] === 'token');
  }, 15_000, `run ${runId} to stream a token`);

  it('reject answers 409 SESSION_BUSY while the session has an active or queued run, creates nothing, and runs once it is free', async () => {
    const first = await acme.submit('rej', 'rej-1', { agent: 'gated' });
    const queued = await acme.submit('rej', 'rej-2', { agent: 'gated' });
    const busy = await acme.submit('rej', 'may I?', { multitask: 'reject' });
    expect(busy.status).toBe(409);
    expect(busy.body.error.code).toBe('SESSION_BUSY');
    const listed = (await acme.get('/runs?sessionId=rej')).body.runs;
    expect(listed.map((r: any) => r.id).sort()).toEqual([first.body.id, queued.body.id].sort());

    openGate('rej-1');
    await acme.waitStatus(first.body.id, ['succeeded']);
    await acme.waitStatus(queued.body.id, ['running']);
    expect((await acme.submit('rej', 'now?', { multitask: 'reject' })).status).toBe(409);

    openGate('rej-2');
    await acme.waitStatus(queued.body.id, ['succeeded']);
    const free = await acme.submit('rej', 'my turn', { multitask: 'reject' });
    expect(free.status).toBe(202);
    await acme.waitStatus(free.body.id, ['succeeded']);
    expect((await history('rej')).map((m) => [m.role, m.content])).toEqual([
      ['user', 'rej-1'], ['assistant', 'holding rej-1 done'],
      ['user', 'rej-2'], ['assistant', 'holding rej-2 done'],
      ['user', 'my turn'], ['assistant', 'my turn'],
    ]);
  });

  it('interrupt cancels the active run (its partial answer kept as incomplete) and runs the new one next', async () => {
    const active = await acme.submit('int', 'int-1', { agent: 'gated' });
    const waiting = await acme.submit('int', 'queued before the interrupt');
    await firstToken(active.body.id);
    const urgent = await acme.submit('int', 'urgent question', { multitask: 'interrupt' });
    expect(urgent.status).toBe(202);

    const cancelled = await acme.waitStatus(active.body.id, ['cancelled']);
    const [u, w] = await Promise.all([
      acme.waitStatus(urgent.body.id, ['succeeded']), acme.waitStatus(waiting.body.id, ['succeeded']),
    ]);
    expect(Date.parse(u.startedAt)).toBeGreaterThanOrEqual(Date.parse(cancelled.finishedAt));
    expect(Date.parse(w.startedAt)).toBeGreaterThanOrEqual(Date.parse(u.finishedAt));
    expect(cancelled.result).toMatchObject({ answer: 'holding int-1', finishReason: 'cancelled' });
    const sse = await acme.sse(`/runs/${active.body.id}/events`);
    expect(tokenText(sse.events)).toBe('holding int-1');

    expect((await history('int')).map((m) => [m.role, m.content, m.incomplete ?? false])).toEqual([
      ['user', 'int-1', false], ['assistant', 'holding int-1', true],
      ['user', 'urgent question', false], ['assistant', 'urgent question', false],
      ['user', 'queued before the interrupt', false], ['assistant', 'queued before the interrupt', false],
    ]);
  });

  it('interrupting a run that has produced nothing yet commits nothing for it', async () => {
    const quiet = await acme.submit('int-quiet', 'quiet-1', { agent: 'gated' });
    await acme.waitStatus(quiet.body.id, ['running']);
    const urgent = await acme.submit('int-quiet', 'next', { multitask: 'interrupt' });
    await acme.waitStatus(urgent.body.id, ['succeeded']);
    expect((await acme.get(`/runs/${quiet.body.id}`)).body.status).toBe('cancelled');
    expect((await history('int-quiet')).map((m) => [m.role, m.content])).toEqual([['user', 'next'], ['assistant', 'next']]);
  });

  it('interrupt on an idle session simply runs', async () => {
    const sub = await acme.submit('int-idle', 'hello', { multitask: 'interrupt' });
    expect(sub.status).toBe(202);
    await acme.waitStatus(sub.body.id, ['succeeded']);
    expect((await history('int-idle')).map((m) => m.content)).toEqual(['hello', 'hello']);
  });
});

describe('idempotent submit', () => {
  it('the same key in the same scope returns the same run: no second run, no second user message', async () => {
    const key = 'order-42/attempt';
    const a = await acme.submit('idem', 'charge it once', { idempotencyKey: key });
    const b = await acme.submit('idem', 'charge it once', { idempotencyKey: key });
    expect(a.status).toBe(202);
    expect(b.status).toBe(200);
    expect(b.body.id).toBe(a.body.id);
    await acme.waitStatus(a.body.id, ['succeeded']);
    const c = await acme.submit('idem', 'charge it once', { idempotencyKey: key });
    expect([c.status, c.body.id, c.body.status]).toEqual([200, a.body.id, 'succeeded']);

    expect((await acme.get('/runs?sessionId=idem')).body.runs).toHaveLength(1);
    expect((await history('idem')).map((m) => m.role)).toEqual(['user', 'assistant']);
    // Remembered for (at least) 24 h.
    const ttl = await h.redis.pttl(h.keys.scope('acme').idempotency(key));
    expect(ttl).toBeGreaterThan(24 * 3600_000 - 60_000);

    // The same key in another scope is another scope's business.
    const globex = await h.client(apiUrl, 'globex', 'client');
    const g = await globex.submit('idem', 'charge it once', { idempotencyKey: key });
    expect(g.status).toBe(202);
    expect(g.body.id).not.toBe(a.body.id);
    await globex.waitStatus(g.body.id, ['succeeded']);
  });
});
