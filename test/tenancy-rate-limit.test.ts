import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/**
 * The per-scope submit rate limit: a token bucket in Redis shared by every API process.
 * Burst 3, then one every 5 s (slow enough that a loaded machine still makes the four quick
 * submits inside one refill): the 4th gets 429 with Retry-After; another scope is not
 * affected; rejected input, a refused submit and an idempotent replay spend no token.
 */
let h: Harness;
let urls: string[];

beforeAll(async () => {
  h = await useHarness({ SUBMIT_RATE_PER_SEC: '0.2', SUBMIT_BURST: '3' });
  // Two API processes: the bucket lives in Redis, so they share it.
  urls = [(await h.startApi()).url, (await h.startApi()).url];
  await h.startWorker();
});

describe('submit rate limit', () => {
  it('allows the burst across API processes, then answers 429 with Retry-After', async () => {
    const [a, b] = [await h.client(urls[0], 'acme'), await h.client(urls[1], 'acme')];
    const statuses = [];
    for (const [i, c] of [a, b, a].entries()) statuses.push((await c.submit(`burst-${i}`, 'hi')).status);
    expect(statuses).toEqual([202, 202, 202]);
    const limited = await b.submit('burst-3', 'one too many');
    expect(limited.status).toBe(429);
    expect(limited.body.error.code).toBe('RATE_LIMITED');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);

    // Another scope has its own bucket.
    const globex = await h.client(urls[0], 'globex');
    expect((await globex.submit('g', 'unaffected')).status).toBe(202);

    // The bucket refills: within a few seconds acme may submit again.
    const back = await waitFor(async () => {
      const r = await a.submit('burst-4', 'later');
      return r.status === 202 ? r : undefined;
    }, 15_000, 'a token to come back');
    await a.waitStatus(back.body.id, ['succeeded']);
  });

  it('spends no token on a refused submit or an idempotent replay: only a run made takes one', async () => {
    const c = await h.client(urls[1], 'hooli');
    const first = await c.submit('replayed', 'once', { idempotencyKey: 'same' });
    expect(first.status).toBe(202);
    for (let i = 0; i < 4; i++) {
      const replay = await c.submit('replayed', 'once', { idempotencyKey: 'same' });
      expect(replay.status).toBe(200);
      expect(replay.body.id).toBe(first.body.id);
      // The same key with another request is refused, and spends nothing either.
      expect((await c.submit('replayed', 'other', { idempotencyKey: 'same' })).status).toBe(409);
    }
    // Two of the burst of 3 are left, whatever was replayed or refused before.
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await c.submit(`new-${i}`, 'fresh')).status);
    expect(made).toEqual([202, 202, 429]);
  });

  it('spends no token on rejected input', async () => {
    const c = await h.client(urls[0], 'initech');
    for (let i = 0; i < 5; i++) {
      expect((await c.post('/runs', { sessionId: 'x', input: { content: '' } })).status).toBe(400);
      // Refused after the body parsed: an attachment the scope does not have.
      expect((await c.post('/runs', { sessionId: 'x', input: { content: 'hi', artifacts: [{ id: 'a0000000000000000000' }] } })).status).toBe(400);
    }
    expect(await h.redis.exists(h.keys.scope('initech').submitBucket)).toBe(0);
    const ok = [];
    for (let i = 0; i < 3; i++) ok.push((await c.submit(`s${i}`, 'fine')).status);
    expect(ok).toEqual([202, 202, 202]);
  });
});

describe('scheduled runs per scope', () => {
  it('past SCHEDULED_MAX_PER_SCOPE a scheduled submit is 429 TOO_MANY_SCHEDULED_RUNS and writes nothing; runs due now, replays and other scopes pass; a cancel frees a place', async () => {
    // Before, scheduled runs were bounded by the submit rate alone: about 1.7 million a day, each kept until due.
    const api = await h.startApi({ SCHEDULED_MAX_PER_SCOPE: '3', SUBMIT_RATE_PER_SEC: '0' });
    const c = await h.client(api.url, 'planner');
    const later = { delayMs: 3_600_000 };
    const made = [];
    for (let i = 0; i < 3; i++) {
      const res = await c.submit(`plan-${i}`, 'remind me', { ...later, idempotencyKey: `plan-${i}` });
      expect(res.status).toBe(202);
      expect(res.body.status).toBe('scheduled');
      made.push(res.body.id as string);
    }
    const state = async () => {
      const keys = (await h.allKeys()).filter((k) => k.includes(':{planner}:')).sort();
      return Promise.all(keys.map(async (k) => [k, String(await h.redis.dumpBuffer(k))]));
    };
    const before = await state();
    const delayed = await c.submit('plan-3', 'one more', later);
    expect([delayed.status, delayed.body.error?.code, delayed.headers.get('retry-after')]).toEqual([429, 'TOO_MANY_SCHEDULED_RUNS', null]);
    expect(delayed.body.error.details).toEqual([{ path: 'body.delayMs', message: expect.stringContaining('SCHEDULED_MAX_PER_SCOPE') }]);
    const at = await c.submit('plan-3', 'one more', { runAt: new Date(Date.now() + 86_400_000).toISOString() });
    expect([at.status, at.body.error.details[0].path]).toEqual([429, 'body.runAt']);
    expect(await state()).toEqual(before);
    // The same request again is the run made before, not one more.
    const replay = await c.submit('plan-0', 'remind me', { ...later, idempotencyKey: 'plan-0' });
    expect([replay.status, replay.body.id]).toEqual([200, made[0]]);
    // A run due now is not scheduled; another scope has room of its own.
    expect((await c.submit('now', 'at once', { runtime: `${h.runtime}-none` })).status).toBe(202);
    expect((await (await h.client(api.url, 'other-planner')).submit('plan', 'x', later)).status).toBe(202);
    // A cancelled scheduled run frees its place.
    expect((await c.post(`/runs/${made[1]}/cancel`, {})).body.status).toBe('cancelled');
    expect((await c.submit('plan-4', 'instead', later)).status).toBe(202);
    expect((await c.submit('plan-5', 'over again', later)).status).toBe(429);
  });
});
