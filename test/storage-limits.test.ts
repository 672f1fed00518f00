import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { call } from './helpers/http.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/**
 * A scope's storage is capped (issue 39's MEDIUM row "no cap on a scope's parked runs or
 * stored input bytes", scaled down, and its HIGH fork row's quota and rate). Before, 87
 * schedules firing every second with 256 KiB inputs parked 3,853 runs and took Redis from
 * 352 MB to 1.17 GB in three minutes, kept a day; ten forks of a 21 MB session added 226 MB.
 * Now: runs queued and not started are capped (maxQueuedRuns), the bytes a scope stores are
 * counted and capped (maxStoredBytes: runs' records until they expire, forks' copies), forks are
 * rate-limited (forksPerMinute, forkBytesPerMinute). Each refusal is a 429 with its code and
 * changes nothing (the scope's keys, byte for byte); a schedule's tick and a re-run are
 * refused by the same submit; stored bytes go down again once runs are purged.
 */
let h: Harness;
let url: string;
let operator: string;
/** Short: a finished run's record expires this long after it ends, so a test sees its bytes go. */
const RETENTION_MS = 1_500;

beforeAll(async () => {
  h = await useHarness({ RETENTION_MS: String(RETENTION_MS), SUBMIT_BURST: '1000' });
  url = (await h.startApi()).url;
  operator = await h.operatorKey();
});

const setLimits = async (scope: string, body: Record<string, unknown>) => {
  const res = await call(url, 'PUT', `/v1/scopes/${scope}/limits`, body, { authorization: `Bearer ${operator}` });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
};
const inUse = async (scope: string) => (await call(url, 'GET', `/v1/scopes/${scope}/limits`, undefined, { authorization: `Bearer ${operator}` })).body.inUse;

/**
 * A digest of every key of the scope: what "changes nothing" compares. Two keys change on
 * their own and are left out: `leases`, where the sweeper moves a dispatched run's deadline
 * every DISPATCH_GRACE_MS (no worker serves these runs), and the submit bucket, which expires
 * once full (a refusal takes no token: the bucket's own tests hold that).
 */
async function scopeState(scope: string): Promise<string> {
  const sk = h.keys.scope(scope);
  const moving = new Set([sk.leases, sk.submitBucket]);
  const keys = (await h.allKeys()).filter((k) => k.startsWith(`${h.prefix}:{${scope}}:`) && !moving.has(k)).sort();
  const hash = createHash('sha1');
  for (const k of keys) hash.update(k).update((await h.redis.dumpBuffer(k)) ?? 'gone');
  return `${keys.length} keys ${hash.digest('hex')}`;
}

/** No worker serves it: runs submitted there stay queued or dispatched. */
const idle = () => `${h.runtime}-idle`;

describe('runs queued and not started', () => {
  it('past maxQueuedRuns a submit, a re-run and a schedule tick are refused with 429 QUEUED_RUNS_LIMIT, and nothing is written', async () => {
    const c = await h.client(url, 'queued');
    await setLimits('queued', { maxQueuedRuns: 5, maxActive: 2 });
    const ids: string[] = [];
    // Two take the scope's slots (dispatched), three park: all five are `queued` to the API.
    for (let i = 0; i < 5; i++) {
      const res = await c.submit(`q${i}`, 'hello', { runtime: idle() });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      ids.push(res.body.id);
    }
    expect((await inUse('queued')).queuedRuns).toBe(5);
    const before = await scopeState('queued');
    const refused = await c.submit('q5', 'one too many', { runtime: idle() });
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ code: 'QUEUED_RUNS_LIMIT', details: [{ path: 'scope', message: expect.stringContaining('5 runs') }] });
    expect(await scopeState('queued')).toBe(before);
    // A run due later is not one of them (SCHEDULED_MAX_PER_SCOPE caps those).
    expect((await c.submit('q6', 'later', { runtime: idle(), delayMs: 600_000 })).status).toBe(202);

    // A re-run is a submit: an ended run (cancelled) re-run while five others wait is refused.
    expect((await c.post(`/runs/${ids[4]}/cancel`, {})).status).toBe(200);
    expect((await c.submit('q7', 'the fifth again', { runtime: idle() })).status).toBe(202);
    const beforeRerun = await scopeState('queued');
    const rerun = await c.post(`/runs/${ids[4]}/rerun`, {});
    expect([rerun.status, rerun.body.error?.code]).toEqual([429, 'QUEUED_RUNS_LIMIT']);
    expect(await scopeState('queued')).toBe(beforeRerun);

    // A schedule's tick goes through the same submit: refused, and the schedule says why.
    const schedule = await c.post('/schedules', {
      cron: '* * * * * *', run: { sessionPerTick: true, input: { content: 'tick' }, runtime: idle() },
    });
    expect(schedule.status, JSON.stringify(schedule.body)).toBe(201);
    const seen = await waitFor(async () => {
      const s = (await c.get(`/schedules/${schedule.body.id}`)).body;
      return s.lastError ? s : undefined;
    }, 15_000, 'a refused tick');
    expect(seen.lastError.code).toBe('QUEUED_RUNS_LIMIT');
    expect(seen.fired).toBe(0);
    expect((await c.del(`/schedules/${schedule.body.id}`)).status).toBe(204);
    expect((await inUse('queued')).queuedRuns).toBe(5);
  });
});

describe('stored bytes', () => {
  it('counts each run record as written; past maxStoredBytes a submit is 429 STORAGE_LIMIT and writes nothing; purged runs give their bytes back', async () => {
    const c = await h.client(url, 'stored');
    await setLimits('stored', { maxStoredBytes: 300_000 });
    const sk = h.keys.scope('stored');
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await c.submit(`s${i}`, 'x'.repeat(100_000), { runtime: idle() });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      ids.push(res.body.id);
    }
    // The count is the records' own: each run's `storedBytes`, the fields its submit wrote.
    const charged = (await Promise.all(ids.map((id) => h.redis.hget(sk.run(id), 'storedBytes')))).map(Number);
    for (const n of charged) expect(n).toBeGreaterThan(100_000);
    expect((await inUse('stored')).storedBytes).toBe(charged[0] + charged[1]);

    const before = await scopeState('stored');
    const memoryBefore = await h.redis.call('MEMORY', 'USAGE', sk.runs) as number;
    const refused = await c.submit('s2', 'x'.repeat(100_000), { runtime: idle() });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('STORAGE_LIMIT');
    // No run of the scope has ended yet: when some bytes may go is unknown, so no Retry-After.
    expect(refused.headers.get('retry-after')).toBeNull();
    expect(await scopeState('stored')).toBe(before);
    expect(await h.redis.call('MEMORY', 'USAGE', sk.runs)).toBe(memoryBefore);

    // Ended, they stay counted until their records expire (RETENTION_MS), then the next submit gives their bytes back.
    for (const id of ids) expect((await c.post(`/runs/${id}/cancel`, {})).status).toBe(200);
    const refusedAgain = await c.submit('s2', 'x'.repeat(100_000), { runtime: idle() });
    expect(refusedAgain.status).toBe(429);
    const retryAfter = Number(refusedAgain.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil(RETENTION_MS / 1000));
    await waitFor(async () => (await h.redis.exists(...ids.map((id) => sk.run(id)))) === 0, 10_000, 'the records to expire');
    // What the sweeper calls about once a minute: the count goes down while the scope submits nothing.
    expect(await h.gateways().sweeper.trimStorage('stored')).toEqual({ stored: 0, more: false });
    expect((await inUse('stored')).storedBytes).toBe(0);
    const after = await c.submit('s2', 'x'.repeat(100_000), { runtime: idle() });
    expect(after.status, JSON.stringify(after.body)).toBe(202);
    expect((await inUse('stored')).storedBytes).toBe(Number(await h.redis.hget(sk.run(after.body.id), 'storedBytes')));
    expect(await h.redis.zcard(sk.storageLedger)).toBe(0);
  });
});

describe('forks', () => {
  const seed = async (scope: string, session: string, bytes: number) => {
    const msg = (role: string) => JSON.stringify({ role, content: 'x'.repeat(bytes / 2), runId: 'r1', createdAt: 1 });
    await h.redis.rpush(h.keys.scope(scope).messages(session), msg('user'), msg('assistant'));
  };

  it('past forksPerMinute a fork is 429 FORK_RATE_LIMITED with Retry-After, and makes nothing', async () => {
    const c = await h.client(url, 'forks');
    await setLimits('forks', { forksPerMinute: 2 });
    await seed('forks', 'src', 2_000);
    for (const to of ['a', 'b']) expect((await c.post('/sessions/src/fork', { atTurn: 1, sessionId: to })).status).toBe(201);
    const before = await scopeState('forks');
    const refused = await c.post('/sessions/src/fork', { atTurn: 1, sessionId: 'c' });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('FORK_RATE_LIMITED');
    // Two a minute: the next in about 30 s.
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(30);
    expect(await scopeState('forks')).toBe(before);
  });

  it('bytes forked a minute: a fork larger than what is left passes while any is left, the next waits for the debt', async () => {
    const c = await h.client(url, 'fork-bytes');
    await setLimits('fork-bytes', { forkBytesPerMinute: 100_000 });
    await seed('fork-bytes', 'src', 150_000);
    expect((await c.post('/sessions/src/fork', { atTurn: 1, sessionId: 'a' })).status).toBe(201);
    const refused = await c.post('/sessions/src/fork', { atTurn: 1, sessionId: 'b' });
    expect(refused.body.error.code).toBe('FORK_RATE_LIMITED');
    // 50,000 bytes below zero at 100,000 a minute: about 30 s.
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(29);
    expect(Number(refused.headers.get('retry-after'))).toBeLessThanOrEqual(31);
  });

  it('counts its copy against the scope storage for as long as the session is kept; past maxStoredBytes it is 429 STORAGE_LIMIT', async () => {
    const c = await h.client(url, 'fork-store');
    const sk = h.keys.scope('fork-store');
    await seed('fork-store', 'src', 60_000);
    const copied = (await h.redis.lrange(sk.messages('src'), 0, -1)).reduce((n, m) => n + Buffer.byteLength(m), 0);
    expect((await c.post('/sessions/src/fork', { atTurn: 1, sessionId: 'a' })).status).toBe(201);
    expect((await inUse('fork-store')).storedBytes).toBe(copied);
    expect(await h.redis.zrange(sk.storageLedger, 0, -1, 'WITHSCORES')).toEqual([`${copied} session:a:messages`, 'inf']);

    await setLimits('fork-store', { maxStoredBytes: copied + 1_000 });
    const before = await scopeState('fork-store');
    const refused = await c.post('/sessions/src/fork', { atTurn: 1, sessionId: 'b' });
    expect([refused.status, refused.body.error.code]).toEqual([429, 'STORAGE_LIMIT']);
    expect(await scopeState('fork-store')).toBe(before);
  });
});

describe('retention', () => {
  it('is a scope limit: a finished run, its log and steps expire after the scope’s retentionMs, and its bytes are listed to go then', async () => {
    const kept = await h.client(url, 'kept');
    const plain = await h.client(url, 'plain');
    await setLimits('kept', { retentionMs: 60_000 });
    const ended = async (c: typeof kept, scope: string) => {
      const id = (await c.submit('r', 'hello', { runtime: idle() })).body.id as string;
      expect((await c.post(`/runs/${id}/cancel`, {})).status).toBe(200);
      const sk = h.keys.scope(scope);
      const [record, events] = await Promise.all([h.redis.pttl(sk.run(id)), h.redis.pttl(sk.events(id))]);
      const [, score] = await h.redis.zrange(sk.storageLedger, 0, 0, 'WITHSCORES');
      // Listed to go at the run's end (its record's finishedAt, Redis's clock) plus its retention.
      const finishedAt = Number(await h.redis.hget(sk.run(id), 'finishedAt'));
      return { record, events, listedFor: Number(score) - finishedAt };
    };
    const long = await ended(kept, 'kept');
    expect(long.record).toBeGreaterThan(RETENTION_MS);
    expect(long.record).toBeLessThanOrEqual(60_000);
    expect(long.events).toBeGreaterThan(RETENTION_MS);
    expect(long.listedFor).toBe(60_000);
    // Another scope keeps the default (RETENTION_MS of this file).
    const short = await ended(plain, 'plain');
    expect(short.record).toBeLessThanOrEqual(RETENTION_MS);
    expect(short.listedFor).toBe(RETENTION_MS);
    const limits = (await call(url, 'GET', '/v1/scopes/kept/limits', undefined, { authorization: `Bearer ${operator}` })).body;
    expect([limits.limits.retentionMs, limits.defaults.retentionMs]).toEqual([60_000, RETENTION_MS]);
  });
});
