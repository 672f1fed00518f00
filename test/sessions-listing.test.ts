import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { openGate, sessionAgents } from './fixtures/session-agents.ts';

/** GET /runs (filters, newest first, cursor) and GET /sessions/:sid/messages (oldest first, cursor). */
let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({ agents: sessionAgents });
  acme = await h.client(api.url, 'acme', 'client');
});

/** Run ids in the listing's order: creation time descending, run id descending within a millisecond. */
const byNewest = (runs: any[]) =>
  [...runs]
    .sort((x, y) => Date.parse(y.createdAt) - Date.parse(x.createdAt) || (y.id < x.id ? -1 : y.id > x.id ? 1 : 0))
    .map((r) => r.id);

/** Follows nextCursor from `path` to the end; returns every page. */
async function allPages(path: string, field: 'runs' | 'messages'): Promise<any[][]> {
  const pages: any[][] = [];
  let cursor: string | null = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const res: { status: number; body: any } = await acme.get(cursor ? `${path}${sep}cursor=${encodeURIComponent(cursor)}` : path);
    expect(res.status).toBe(200);
    pages.push(res.body[field]);
    cursor = res.body.nextCursor;
    expect(pages.length).toBeLessThan(100);
  } while (cursor);
  return pages;
}

describe('GET /runs', () => {
  it('lists newest first, filters by session, status, agent and runtime, and pages with a cursor', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await acme.submit('list-a', `a${i}`)).body.id);
    for (let i = 0; i < 3; i++) ids.push((await acme.submit('list-b', `b${i}`)).body.id);
    const done = await Promise.all(ids.map((id) => acme.waitStatus(id, ['succeeded'])));
    const held = await acme.submit('list-b', 'list-held', { agent: 'gated' });
    await acme.waitStatus(held.body.id, ['running']);
    const newestFirst = (runs: any[]) => runs.map((r) => r.id);
    const a = (await acme.get('/runs?sessionId=list-a')).body;
    expect(newestFirst(a.runs)).toEqual(byNewest(done.slice(0, 5)));
    expect(a.nextCursor).toBeNull();

    const pages = await allPages('/runs?sessionId=list-b&limit=2', 'runs');
    expect(pages.map((p) => p.length)).toEqual([2, 2]);
    expect(newestFirst(pages.flat())).toEqual([held.body.id, ...byNewest(done.slice(5))]);

    // Agent and runtime filter like status does, alone or together.
    expect(newestFirst((await acme.get('/runs?agent=gated')).body.runs)).toEqual([held.body.id]);
    const echoOfA = (await acme.get(`/runs?sessionId=list-a&agent=echo&runtime=${h.runtime}`)).body;
    expect(newestFirst(echoOfA.runs)).toEqual(byNewest(done.slice(0, 5)));
    expect((await acme.get(`/runs?runtime=${h.runtime}-elsewhere`)).body).toEqual({ runs: [], nextCursor: null });
    expect((await acme.get('/runs?agent=a:b')).status).toBe(400);

    const running = (await acme.get('/runs?status=running')).body.runs;
    expect(newestFirst(running)).toEqual([held.body.id]);
    const finished = await allPages('/runs?status=succeeded,failed&limit=3', 'runs');
    expect(newestFirst(finished.flat())).toEqual(byNewest(done));

    openGate('list-held');
    await acme.waitStatus(held.body.id, ['succeeded']);
    expect((await acme.get('/runs?status=running')).body.runs).toEqual([]);
  });

  it('runs created in the same millisecond are neither skipped nor repeated across pages', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await acme.submit(`same-ms-${i}`, `m${i}`)).body.id);
    await Promise.all(ids.map((id) => acme.waitStatus(id, ['succeeded'])));
    // A burst lands in one millisecond on a fast machine; make sure of it for this test.
    const sk = h.keys.scope('acme');
    const score = Number(await h.redis.zscore(sk.runs, ids[0]));
    await h.redis.zadd(sk.runs, ...ids.flatMap((id) => [score, id]));
    const expected = (await h.redis.zrevrangebyscore(sk.runs, score, score)).filter((id) => ids.includes(id));

    for (const limit of [1, 2, 3]) {
      const pages = await allPages(`/runs?limit=${limit}`, 'runs');
      const listed = pages.flat().map((r) => r.id).filter((id: string) => ids.includes(id));
      expect(listed).toEqual(expected);
    }
  });

  it('rejects a malformed cursor with 400', async () => {
    const res = await acme.get('/runs?cursor=12345');
    expect(res.status).toBe(400);
    expect(res.body.error.details[0].path).toBe('query.cursor');
  });
});

describe('GET /sessions/:sid/messages', () => {
  it('returns the committed history oldest first, paginated, each message with role, content, runId, createdAt', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await acme.submit('paged', `turn ${i}`)).body.id);
    await Promise.all(ids.map((id) => acme.waitStatus(id, ['succeeded'])));

    const pages = await allPages('/sessions/paged/messages?limit=3', 'messages');
    expect(pages.map((p) => p.length)).toEqual([3, 3, 2]);
    const msgs = pages.flat();
    expect(msgs.map((m) => [m.role, m.content, m.runId])).toEqual(
      ids.flatMap((id, i) => [['user', `turn ${i}`, id], ['assistant', `turn ${i}`, id]]),
    );
    for (const m of msgs) {
      expect(Object.keys(m).sort()).toEqual(['content', 'createdAt', 'role', 'runId']);
      expect(m.createdAt).toBeTypeOf('number');
    }
    // A user message is stamped when it was submitted and an answer when it was committed;
    // runs queued behind each other were all submitted before the first answer, so the two
    // kinds interleave. Each kind is in order, and each answer follows its own question.
    const sorted = (xs: number[]) => [...xs].sort((x, y) => x - y);
    const asked = msgs.filter((m) => m.role === 'user').map((m) => m.createdAt);
    const answered = msgs.filter((m) => m.role === 'assistant').map((m) => m.createdAt);
    expect(sorted(asked)).toEqual(asked);
    expect(sorted(answered)).toEqual(answered);
    asked.forEach((t, i) => expect(t).toBeLessThanOrEqual(answered[i]));

    const empty = (await acme.get('/sessions/never-used/messages')).body;
    expect(empty).toEqual({ messages: [], nextCursor: null });
  });
});
