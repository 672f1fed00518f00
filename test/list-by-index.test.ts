import { beforeAll, describe, expect, it } from 'vitest';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { parseRunRecord, RUN_STATUSES, type RunRecord } from '../src/lib/transitions/record.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import type { Submissions } from '../src/lib/engine/submissions.ts';
import { ownRedis, useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { watchCommands } from './helpers/monitor.ts';
import { track } from './helpers/resources.ts';
import { doorOf } from './helpers/submit.ts';

/**
 * Invariant 12 for listings: `GET /runs?status=blocked&limit=1` read every run record of the
 * scope (one HGETALL per run, memory and schema included) to return one. Status filters now
 * read the status indexes setStatus keeps, and a listing reads only the fields it shows.
 * Commands are counted with INFO commandstats, so this file brings a redis-server of its own:
 * no other file's commands are in the counts.
 * No fair-share pass runs: its reads every second would count too.
 */
const RUNS = 720;
/** A few runs of an agent and a runtime no other run has, created before all the others. */
const RARE = 3;
const RARE_RUNTIME = 'rare-rt';
let h: Harness;
let acme: ScopeClient;
let store: RunStore;
let door: Submissions;
let all: string[] = [];

beforeAll(async () => {
  h = await useHarness({ REDIS_URL: await ownRedis(), SWEEP_INTERVAL_MS: '0', FAIR_SHARE_INTERVAL_MS: '0', MAX_ACTIVE_PER_SCOPE: '100000', SUBMIT_RATE_PER_SEC: '0' });
  const transitions = h.gateways();
  store = new RunStore(h.redis, h.keys, h.config, transitions.api);
  door = doorOf(h, { transitions: transitions.api });
  // Each run carries 4 KiB of caller memory: what a listing must not read.
  const memory = { notes: 'm'.repeat(4096) };
  const rare: string[] = [];
  for (let i = 0; i < RARE; i++) {
    const { run } = await door.submit({
      scope: 'acme', sessionId: `r${i}`, runtime: i === 0 ? h.runtime : RARE_RUNTIME, agent: 'rare',
      input: { content: `rare ${i}` }, memory, multitask: 'enqueue',
    });
    rare.push(run.id);
  }
  for (let i = 0; i < RUNS; i++) {
    const { run } = await door.submit({
      scope: 'acme', sessionId: `s${i % 40}`, runtime: h.runtime, agent: i % 3 ? 'echo' : 'other',
      input: { content: `run ${i}` }, memory, multitask: 'enqueue',
    });
    all.push(run.id);
  }
  // Move some of the session heads along: running, succeeded, failed, blocked, retrying, cancelled.
  const heads = (await Promise.all(all.map((id) => store.get('acme', id)))).filter((r) => r!.status === 'dispatched') as RunRecord[];
  const plan = ['blocked', 'succeeded', 'succeeded', 'failed', 'retrying', 'running', 'running', 'cancel'];
  for (const [i, head] of heads.slice(0, plan.length).entries()) {
    if (plan[i] === 'cancel') { await transitions.api.scope('acme').cancel(head.id); continue; }
    const claim = await transitions.worker.claim({ scope: 'acme', runId: head.id }, 'w-test', {});
    if (claim.kind !== 'claimed') throw new Error(`could not claim ${head.id}: ${claim.kind}`);
    const attempt = new Attempt(claim.run, claim.fence, h.keys.scope('acme'));
    if (plan[i] === 'blocked') await transitions.worker.of(attempt).block({ stepKey: 'tool:x:1', reason: 'test', since: Date.now() });
    if (plan[i] === 'succeeded' || plan[i] === 'failed') {
      await transitions.worker.of(attempt).finish({ status: plan[i] as 'succeeded', result: JSON.stringify({ answer: 'a', finishReason: 'stop', toolCallsSeen: 0 }) });
    }
    if (plan[i] === 'retrying') await transitions.worker.of(attempt).retry({ delayMs: 3_600_000, lastError: '{"code":"T","message":"t"}' });
  }
  all.push(...rare);
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
}, 120_000);

/** Calls per command since the last CONFIG RESETSTAT. */
async function commandStats(): Promise<Record<string, number>> {
  const info = await h.redis.info('commandstats');
  const out: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]] = Number(m[2]);
  return out;
}

/** Every run of the scope as its record says, newest first (the listing's order). */
async function everyRun(): Promise<RunRecord[]> {
  const runs = await Promise.all(all.map(async (id) => parseRunRecord(await h.redis.hgetall(h.keys.scope('acme').run(id)))));
  return (runs.filter(Boolean) as RunRecord[]).sort((a, b) => b.createdAt - a.createdAt || (b.id < a.id ? -1 : b.id > a.id ? 1 : 0));
}

async function allPages(query: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 1000; pages++) {
    const res: { status: number; body: any } = await acme.get(`/runs?${query}${cursor ? `&cursor=${cursor}` : ''}`);
    expect(res.status, query).toBe(200);
    ids.push(...res.body.runs.map((r: any) => r.id));
    cursor = res.body.nextCursor;
    if (!cursor) return ids;
  }
  throw new Error('the listing does not end');
}

describe('listing by index', () => {
  it('status=blocked&limit=1 reads one run, not every run of the scope (INFO commandstats)', async () => {
    const blocked = (await everyRun()).filter((r) => r.status === 'blocked');
    expect(blocked).toHaveLength(1);
    await h.redis.config('RESETSTAT');
    const res = await acme.get('/runs?status=blocked&limit=1');
    const stats = await commandStats();
    expect(res.status).toBe(200);
    expect(res.body.runs.map((r: any) => [r.id, r.status])).toEqual([[blocked[0].id, 'blocked']]);
    console.log(`GET /runs?status=blocked&limit=1 over ${RUNS} runs: ${JSON.stringify(stats)}`);
    // The key check is the only HGETALL; the run is one HMGET of the fields the API shows.
    expect(stats.hgetall ?? 0).toBeLessThanOrEqual(1);
    expect(stats.hmget).toBe(1);
    const total = Object.entries(stats).filter(([c]) => c !== 'info' && c !== 'config|resetstat').reduce((n, [, v]) => n + v, 0);
    expect(total).toBeLessThanOrEqual(5);

    // An unfiltered page of one, and a status with hundreds of runs: as cheap.
    for (const query of ['limit=1', 'status=queued&limit=1']) {
      await h.redis.config('RESETSTAT');
      expect((await acme.get(`/runs?${query}`)).body.runs).toHaveLength(1);
      const s = await commandStats();
      expect([query, s.hmget, (s.hgetall ?? 0) <= 1]).toEqual([query, 1, true]);
    }
  });

  it('agent= and runtime= read their own index, not every run of the scope (INFO commandstats)', async () => {
    const runs = await everyRun();
    const rare = runs.filter((r) => r.agent === 'rare');
    const onRare = runs.filter((r) => r.runtime === RARE_RUNTIME);
    expect([rare.length, onRare.length]).toEqual([RARE, RARE - 1]);
    const total = (s: Record<string, number>) =>
      Object.entries(s).filter(([c]) => c !== 'info' && c !== 'config|resetstat').reduce((n, [, v]) => n + v, 0);
    // Alone: the index walked holds only matching runs, so the page is one ZREVRANGEBYSCORE
    // and one HMGET of the run shown (the rare runs are the oldest: a walk of the scope's
    // index read all of it before finding one).
    for (const [query, expected] of [['agent=rare&limit=1', rare[0]], [`runtime=${RARE_RUNTIME}&limit=1`, onRare[0]]] as const) {
      await h.redis.config('RESETSTAT');
      const res = await acme.get(`/runs?${query}`);
      const stats = await commandStats();
      expect(res.status).toBe(200);
      expect(res.body.runs.map((r: any) => r.id), query).toEqual([expected.id]);
      console.log(`GET /runs?${query} over ${RUNS + RARE} runs: ${JSON.stringify(stats)}`);
      expect([query, stats.hmget, (stats.hgetall ?? 0) <= 1]).toEqual([query, 1, true]);
      expect(total(stats), query).toBeLessThanOrEqual(5);
    }
    // Combined with a filter whose index is large: the smallest index is walked (ZCARDs), and
    // only its entries are checked, so reads stay bounded by the rare runs, not the scope.
    for (const query of ['agent=rare&status=queued,dispatched&limit=1', `runtime=${RARE_RUNTIME}&agent=echo&limit=1`, 'agent=rare&sessionId=s0&limit=1']) {
      await h.redis.config('RESETSTAT');
      const res = await acme.get(`/runs?${query}`);
      const stats = await commandStats();
      expect(res.status).toBe(200);
      console.log(`GET /runs?${query}: ${JSON.stringify(stats)}`);
      expect(stats.hmget ?? 0, query).toBeLessThanOrEqual(RARE + 1);
      expect(total(stats), query).toBeLessThanOrEqual(RARE + 12);
    }
  });

  it('reads only the fields it shows: never memory, outputSchema or the lease', async () => {
    const monitor = await watchCommands(h.redisUrl);
    track(monitor, async () => monitor.stop());
    const res = await acme.get('/runs?status=queued,dispatched&limit=20&agent=echo');
    expect(res.body.runs).toHaveLength(20);
    await new Promise((r) => setTimeout(r, 200));
    monitor.stop();
    const onRuns = monitor.seen.filter((args) => /:run:/.test(args[1] ?? ''));
    expect(onRuns.length).toBeGreaterThan(0);
    for (const args of onRuns) {
      // HSTRLEN measures a field without reading it (a page's byte budget).
      expect(['hmget', 'hstrlen'], args.join(' ')).toContain(args[0].toLowerCase());
      expect(args.slice(2), args.join(' ')).not.toContain('memory');
      expect(args.slice(2), args.join(' ')).not.toContain('outputSchema');
      expect(args.slice(2), args.join(' ')).not.toContain('leaseOwner');
    }
    // What a listed run shows is what GET /runs/:id shows.
    const one = res.body.runs[0];
    expect(one).toEqual((await acme.get(`/runs/${one.id}`)).body);
  });

  it('every filter and page size lists exactly what the records say, newest first', async () => {
    const runs = await everyRun();
    const sessions = ['s0', 's7'];
    const cases: [string, (r: RunRecord) => boolean][] = [
      ['', () => true],
      ['status=queued', (r) => r.status === 'queued'],
      ['status=dispatched,running,retrying', (r) => ['dispatched', 'running', 'retrying'].includes(r.status)],
      ['status=succeeded,failed,cancelled,blocked', (r) => ['succeeded', 'failed', 'cancelled', 'blocked'].includes(r.status)],
      ['status=queued&agent=other', (r) => r.status === 'queued' && r.agent === 'other'],
      [`status=dispatched&runtime=${h.runtime}`, (r) => r.status === 'dispatched' && r.runtime === h.runtime],
      ['status=dispatched&runtime=elsewhere', () => false],
      ['agent=rare', (r) => r.agent === 'rare'],
      ['agent=other', (r) => r.agent === 'other'],
      [`runtime=${RARE_RUNTIME}`, (r) => r.runtime === RARE_RUNTIME],
      [`runtime=${h.runtime}`, (r) => r.runtime === h.runtime],
      [`runtime=${h.runtime}&agent=rare`, (r) => r.runtime === h.runtime && r.agent === 'rare'],
      ['agent=echo&status=queued', (r) => r.agent === 'echo' && r.status === 'queued'],
      ['agent=rare&status=queued,dispatched', (r) => r.agent === 'rare' && ['queued', 'dispatched'].includes(r.status)],
      ['agent=other&sessionId=s3', (r) => r.agent === 'other' && r.sessionId === 's3'],
      ['agent=echo&sessionId=s3', (r) => r.agent === 'echo' && r.sessionId === 's3'],
      ['agent=elsewhere', () => false],
      ...sessions.map((s): [string, (r: RunRecord) => boolean] => [`sessionId=${s}`, (r) => r.sessionId === s]),
      ...sessions.map((s): [string, (r: RunRecord) => boolean] => [`sessionId=${s}&status=queued`, (r) => r.sessionId === s && r.status === 'queued']),
      // Few runs in these statuses, many in the session: the status indexes are walked instead.
      ...sessions.map((s): [string, (r: RunRecord) => boolean] => [`sessionId=${s}&status=blocked,succeeded`, (r) => r.sessionId === s && ['blocked', 'succeeded'].includes(r.status)]),
    ];
    for (const [query, keep] of cases) {
      const expected = runs.filter(keep).map((r) => r.id);
      // Pages of one over hundreds of runs are hundreds of requests: only where they are few.
      for (const limit of expected.length <= 60 ? [1, 7, 200] : [7, 200]) {
        expect(await allPages(`${query}${query ? '&' : ''}limit=${limit}`), `${query} limit=${limit}`).toEqual(expected);
      }
    }
  });

  it('the status indexes hold every run in exactly the status its record has', async () => {
    const runs = await everyRun();
    for (const status of RUN_STATUSES) {
      const indexed = (await h.redis.zrange(h.keys.scope('acme').runsByStatus(status), 0, -1)).sort();
      expect(indexed, status).toEqual(runs.filter((r) => r.status === status).map((r) => r.id).sort());
    }
  });

  it('the agent and runtime indexes hold every run of that agent or runtime, scored by creation', async () => {
    const runs = await everyRun();
    const sk = h.keys.scope('acme');
    for (const agent of ['echo', 'other', 'rare']) {
      const indexed = await h.redis.zrange(sk.runsByAgent(agent), 0, -1, 'WITHSCORES');
      const expected = runs.filter((r) => r.agent === agent).sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
      expect(indexed, agent).toEqual(expected.flatMap((r) => [r.id, String(r.createdAt)]));
    }
    for (const runtime of [h.runtime, RARE_RUNTIME]) {
      const indexed = (await h.redis.zrange(sk.runsByRuntime(runtime), 0, -1)).sort();
      expect(indexed, runtime).toEqual(runs.filter((r) => r.runtime === runtime).map((r) => r.id).sort());
    }
  });

  it('an expired run is left out and its index entry dropped, as in the scope listing', async () => {
    const queued = (await everyRun()).filter((r) => r.status === 'queued');
    const gone = queued[0];
    const index = h.keys.scope('acme').runsByStatus('queued');
    // What retention does to a finished run's record; its index entries stay behind.
    await h.redis.del(h.keys.scope('acme').run(gone.id));
    all = all.filter((id) => id !== gone.id);
    const listed = (await acme.get('/runs?status=queued&limit=1')).body.runs.map((r: any) => r.id);
    expect(listed).toEqual([queued[1].id]);
    expect(await h.redis.zscore(index, gone.id)).toBeNull();
  });

  it('an expired run met by an agent or runtime listing is dropped from the index walked', async () => {
    const sk = h.keys.scope('acme');
    const rare = (await everyRun()).filter((r) => r.agent === 'rare');
    const [gone, ...left] = rare;
    expect(gone.runtime).toBe(RARE_RUNTIME);
    await h.redis.del(sk.run(gone.id));
    all = all.filter((id) => id !== gone.id);
    expect((await acme.get('/runs?agent=rare')).body.runs.map((r: any) => r.id)).toEqual(left.map((r) => r.id));
    expect(await h.redis.zscore(sk.runsByAgent('rare'), gone.id)).toBeNull();
    expect(await h.redis.zscore(sk.runsByRuntime(gone.runtime), gone.id)).not.toBeNull();
    expect((await acme.get(`/runs?runtime=${gone.runtime}&limit=200`)).body.runs.map((r: any) => r.id)).not.toContain(gone.id);
    expect(await h.redis.zscore(sk.runsByRuntime(gone.runtime), gone.id)).toBeNull();
  });
});
