import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { openGate, tenancyAgents } from './helpers/tenancy-agents.ts';

/**
 * Scoped admin: stats count one (scope, runtime) pair exactly; a drain parks that pair's
 * runs without losing any, and resumes them; cancelQueued cancels that pair's waiting runs
 * and nothing of another scope or another runtime.
 */
let h: Harness;
let url: string;

beforeAll(async () => {
  // No fair-share pass: the drain test needs a run dispatched past a busy worker's one slot,
  // which the pass's live-capacity cap would park instead once it has counted that worker.
  h = await useHarness({ FAIR_SHARE_INTERVAL_MS: '0' });
  url = (await h.startApi()).url;
});

const stats = async (c: ScopeClient, runtime: string) => {
  const r = await c.get(`/runtimes/${runtime}/stats`);
  expect(r.status).toBe(200);
  return r.body;
};

const zero = {
  scheduled: 0, queued: 0, running: 0, retrying: 0, waiting: 0, blocked: 0, succeeded: 0, failed: 0, cancelled: 0, expired: 0,
};

describe('GET …/runtimes/{runtimeId}/stats', () => {
  it('counts every state of one scope on one runtime, and nothing of another scope or runtime', async () => {
    await h.startWorker({ agents: tenancyAgents });
    const acme = await h.client(url, 'acme');
    const globex = await h.client(url, 'globex');
    const rt = h.runtime;

    const ok1 = await acme.submit('ok-1', 'one');
    const ok2 = await acme.submit('ok-2', 'two');
    const failed = await acme.submit('fails', 'x', { agent: 'fail' });
    const retrying = await acme.submit('retries', 'x', { agent: 'slow-retry', maxAttempts: 5 });
    const blocked = await acme.submit('blocks', 'x', { agent: 'charge' });
    const running = await acme.submit('busy', 'stats-gate', { agent: 'gate' });
    await acme.waitStatus(running.body.id, ['running']);
    // Behind the running run in its session: these wait (queued) in FIFO order.
    const queued1 = await acme.submit('busy', 'q1');
    const queued2 = await acme.submit('busy', 'q2');
    const toCancel = await acme.submit('busy', 'q3');
    expect((await acme.post(`/runs/${toCancel.body.id}/cancel`, {})).body.status).toBe('cancelled');
    const other = await globex.submit('g-1', 'globex run');

    await acme.waitStatus(ok1.body.id, ['succeeded']);
    await acme.waitStatus(ok2.body.id, ['succeeded']);
    await acme.waitStatus(failed.body.id, ['failed']);
    await acme.waitStatus(retrying.body.id, ['retrying']);
    await acme.waitStatus(blocked.body.id, ['blocked']);
    await globex.waitStatus(other.body.id, ['succeeded']);
    for (const q of [queued1, queued2]) expect((await acme.get(`/runs/${q.body.id}`)).body.status).toBe('queued');

    const s = await stats(acme, rt);
    console.log('acme stats under mixed states:', JSON.stringify(s));
    expect(s).toMatchObject({
      scope: 'acme', runtimeId: rt, draining: false, liveWorkers: 1,
      counts: { queued: 2, running: 1, retrying: 1, blocked: 1, succeeded: 2, failed: 1, cancelled: 1 },
    });
    expect(s.oldestQueuedAgeMs).toBeTypeOf('number');
    expect(s.oldestQueuedAgeMs).toBeGreaterThanOrEqual(0);

    expect((await stats(globex, rt)).counts).toEqual({ ...zero, succeeded: 1 });
    const elsewhere = await stats(acme, `${rt}-unused`);
    expect(elsewhere).toMatchObject({ counts: zero, oldestQueuedAgeMs: null, draining: false, liveWorkers: 0 });

    // The running run finishes, the session's next two run: terminal counts are cumulative.
    openGate('stats-gate');
    await acme.waitStatus(queued2.body.id, ['succeeded']);
    const after = await stats(acme, rt);
    expect(after.counts).toEqual({ ...zero, retrying: 1, blocked: 1, succeeded: 5, failed: 1, cancelled: 1 });
    expect(after.oldestQueuedAgeMs).toBeNull();

    // A retrying run cancelled leaves retrying for cancelled.
    await acme.post(`/runs/${retrying.body.id}/cancel`, {});
    expect((await stats(acme, rt)).counts).toMatchObject({ retrying: 0, cancelled: 2 });
  });

  it('keeps counts an earlier release wrote (one counter per status) right as runs move on', async () => {
    const scope = 'initech';
    const client = await h.client(url, scope);
    const rt = `${h.runtime}-u`;
    await h.startWorker({ env: { RUNTIME: rt } });
    // As an earlier release left them: per status, what is in it now (terminal: ever).
    await h.redis.hset(h.keys.scope(scope).stats(rt), { queued: 3, running: 2, succeeded: 7, failed: 1, 'wait:input': 1 });
    const run = await client.submit('upgrade', 'hello', { runtime: rt });
    await client.waitStatus(run.body.id, ['succeeded']);
    expect((await stats(client, rt)).counts).toEqual({ ...zero, queued: 3, running: 2, succeeded: 8, failed: 1 });
  });

  it('is admin only: a client key of the scope gets 403', async () => {
    const client = await h.client(url, 'acme', 'client');
    const r = await client.get(`/runtimes/${h.runtime}/stats`);
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('FORBIDDEN');
    expect((await client.post(`/runtimes/${h.runtime}/drain`, {})).status).toBe(403);
    expect((await client.del(`/runtimes/${h.runtime}/drain`)).status).toBe(403);
  });
});

describe('drain', () => {
  it('lets running runs finish, keeps queued runs queued, refuses submits, and resumes them all', async () => {
    const rt = `${h.runtime}-d`;
    await h.startWorker({ agents: tenancyAgents, env: { RUNTIME: rt, WORKER_CONCURRENCY: '1' } });
    const acme = await h.client(url, 'acme');
    const submit = (session: string, content: string, extra: Record<string, unknown> = {}) =>
      acme.submit(session, content, { runtime: rt, ...extra });

    const running = await submit('d1', 'drain-gate', { agent: 'gate' });
    await acme.waitStatus(running.body.id, ['running']);
    const behind = await submit('d1', 'behind the running one'); // session FIFO: queued
    const waiting = await submit('d2', 'dispatched, the only worker slot is busy');
    expect(waiting.status).toBe(202);

    const drained = await acme.post(`/runtimes/${rt}/drain`, {});
    expect(drained.status).toBe(200);
    expect(drained.body).toEqual({ scope: 'acme', runtimeId: rt, draining: true, cancelled: 0 });
    // The dispatched run is parked by the drain itself, its slot given back, before any
    // worker could claim its job.
    const held = h.keys.scope('acme').held(rt);
    expect(await h.redis.lrange(held, 0, -1)).toEqual([waiting.body.id]);
    expect(await h.redis.hget(h.keys.scope('acme').run(waiting.body.id), 'status')).toBe('queued');
    expect(await h.redis.zscore(h.keys.scope('acme').leases, waiting.body.id)).toBeNull();
    const refused = await submit('d3', 'too late');
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('DRAINING');

    openGate('drain-gate');
    expect((await acme.waitStatus(running.body.id, ['succeeded'])).result.answer).toBe('passed drain-gate');
    // The session's next one is parked too once the session moved on.
    await waitFor(async () => (await h.redis.llen(held)) === 2, 15_000, 'both runs parked by the drain');
    for (const r of [behind, waiting]) expect((await acme.get(`/runs/${r.body.id}`)).body.status).toBe('queued');
    const s = await stats(acme, rt);
    expect(s).toMatchObject({ draining: true, counts: { ...zero, queued: 2, succeeded: 1 } });
    expect(s.oldestQueuedAgeMs).toBeGreaterThanOrEqual(0);
    const listed = (await acme.get('/runtimes')).body.runtimes.find((x: any) => x.runtimeId === rt);
    expect(listed).toMatchObject({ draining: true, liveWorkers: 1 });

    const resumed = await acme.del(`/runtimes/${rt}/drain`);
    expect(resumed.status).toBe(200);
    expect(resumed.body).toEqual({ scope: 'acme', runtimeId: rt, draining: false, resumed: 2 });
    await acme.waitStatus(behind.body.id, ['succeeded']);
    await acme.waitStatus(waiting.body.id, ['succeeded']);
    const later = await submit('d3', 'accepted again');
    expect(later.status).toBe(202);
    await acme.waitStatus(later.body.id, ['succeeded']);
    expect((await stats(acme, rt)).counts).toEqual({ ...zero, succeeded: 4 });
  });

  it('with cancelQueued cancels only that scope’s waiting runs on that runtime', async () => {
    const rtX = `${h.runtime}-x`;
    const rtY = `${h.runtime}-y`;
    const acme = await h.client(url, 'acme');
    const globex = await h.client(url, 'globex');
    // No worker serves rtX or rtY yet: every run waits.
    const a1 = await acme.submit('ax1', 'a1', { runtime: rtX });
    const a2 = await acme.submit('ax1', 'a2 behind a1', { runtime: rtX });
    const a3 = await acme.submit('ax2', 'a3', { runtime: rtX });
    const aY = await acme.submit('ay1', 'acme on the other runtime', { runtime: rtY });
    const g1 = await globex.submit('gx1', 'globex 1', { runtime: rtX });
    const g2 = await globex.submit('gx2', 'globex 2', { runtime: rtX });
    expect(a1.status).toBe(202);
    expect(a1.body.warnings?.[0]).toMatch(/no live worker/);

    const drained = await acme.post(`/runtimes/${rtX}/drain`, { cancelQueued: true });
    expect(drained.status).toBe(200);
    expect(drained.body).toEqual({ scope: 'acme', runtimeId: rtX, draining: true, cancelled: 3 });
    for (const r of [a1, a2, a3]) expect((await acme.get(`/runs/${r.body.id}`)).body.status).toBe('cancelled');
    expect((await acme.get(`/runs/${aY.body.id}`)).body.status).toBe('queued');
    for (const r of [g1, g2]) expect((await globex.get(`/runs/${r.body.id}`)).body.status).toBe('queued');
    expect(await stats(acme, rtX)).toMatchObject({ draining: true, counts: { ...zero, cancelled: 3 }, oldestQueuedAgeMs: null });
    expect(await stats(globex, rtX)).toMatchObject({ draining: false, counts: { ...zero, queued: 2 } });
    expect(await stats(acme, rtY)).toMatchObject({ draining: false, counts: { ...zero, queued: 1 } });

    // Workers come: globex's runs and acme's run on the other runtime run; acme stays drained on rtX.
    await h.startWorker({ env: { RUNTIME: rtX } });
    await h.startWorker({ env: { RUNTIME: rtY } });
    for (const r of [g1, g2]) await globex.waitStatus(r.body.id, ['succeeded']);
    await acme.waitStatus(aY.body.id, ['succeeded']);
    expect((await acme.submit('ax3', 'refused', { runtime: rtX })).body.error.code).toBe('DRAINING');
    expect((await globex.submit('gx3', 'accepted', { runtime: rtX })).status).toBe(202);

    expect((await acme.del(`/runtimes/${rtX}/drain`)).body).toEqual({ scope: 'acme', runtimeId: rtX, draining: false, resumed: 0 });
    const again = await acme.submit('ax3', 'accepted again', { runtime: rtX });
    expect(again.status).toBe(202);
    await acme.waitStatus(again.body.id, ['succeeded']);
    for (const r of [a1, a2, a3]) expect((await acme.get(`/runs/${r.body.id}`)).body.status).toBe('cancelled');
  });

  it('rejects a drain body with unknown fields or the wrong type, changing nothing', async () => {
    const acme = await h.client(url, 'acme');
    // BullMQ's own housekeeping keys (stalled-check) come and go by themselves, as does a scope's
    // submit bucket (it expires once full again, here one an earlier test drew on): compare the rest.
    const batonKeys = async () => (await h.allKeys()).filter((k) => !k.startsWith(`${h.prefix}:q:`) && !k.includes(':ratelimit:')).sort();
    const before = await batonKeys();
    for (const body of [{ cancelQueued: 'yes' }, { cancel: true }, [1]]) {
      const r = await acme.post(`/runtimes/${h.runtime}/drain`, body);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('VALIDATION_FAILED');
    }
    expect((await acme.post('/runtimes/a:b/drain', {})).status).toBe(400);
    expect(await batonKeys()).toEqual(before);
  });
});
