import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { startLocalRedis } from '../src/cli/local-redis.ts';
import { Attempt } from '../src/lib/engine/attempt.ts';
import { parseRunRecord, RUN_STATUSES, type RunRecord } from '../src/lib/engine/record.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * Invariant 12 for listings: `GET /runs?status=blocked&limit=1` read every run record of the
 * scope (one HGETALL per run, memory and schema included) to return one. Status filters now
 * read the status indexes setStatus keeps, and a listing reads only the fields it shows.
 * Commands are counted with INFO commandstats, so this file brings a redis-server of its own:
 * no other file's commands are in the counts.
 */
const RUNS = 720;
let h: Harness;
let acme: ScopeClient;
let store: RunStore;
let all: string[] = [];

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'baton-list-index-'));
  const redis = await startLocalRedis(dir, ['--appendonly', 'no']);
  track(redis, async () => { await redis.stop(); rmSync(dir, { recursive: true, force: true }); });
  h = await useHarness({ REDIS_URL: redis.url, SWEEP_INTERVAL_MS: '0', MAX_ACTIVE_PER_SCOPE: '100000', SUBMIT_RATE_PER_SEC: '0' });
  const transitions = h.transitions();
  store = new RunStore(h.redis, h.keys, h.config, transitions);
  // Each run carries 4 KiB of caller memory: what a listing must not read.
  const memory = { notes: 'm'.repeat(4096) };
  for (let i = 0; i < RUNS; i++) {
    const { run } = await store.submit({
      scope: 'acme', sessionId: `s${i % 40}`, runtime: h.runtime, agent: i % 3 ? 'echo' : 'other',
      input: { content: `run ${i}` }, memory, multitask: 'enqueue',
    });
    all.push(run.id);
  }
  // Move some of the session heads along: running, succeeded, failed, blocked, retrying, cancelled.
  const heads = (await Promise.all(all.map((id) => store.get('acme', id)))).filter((r) => r!.status === 'dispatched') as RunRecord[];
  const plan = ['blocked', 'succeeded', 'succeeded', 'failed', 'retrying', 'running', 'running', 'cancel'];
  for (const [i, head] of heads.slice(0, plan.length).entries()) {
    if (plan[i] === 'cancel') { await transitions.cancel('acme', head.id); continue; }
    const claim = await transitions.claim({ scope: 'acme', runId: head.id }, 'w-test', {});
    if (claim.kind !== 'claimed') throw new Error(`could not claim ${head.id}: ${claim.kind}`);
    const attempt = new Attempt(claim.run, claim.fence, h.keys.scope('acme'));
    if (plan[i] === 'blocked') await transitions.block(attempt, { stepKey: 'tool:x:1', reason: 'test', since: Date.now() });
    if (plan[i] === 'succeeded' || plan[i] === 'failed') {
      await transitions.finish(attempt, { status: plan[i] as 'succeeded', result: JSON.stringify({ answer: 'a', finishReason: 'stop', toolCallsSeen: 0 }) });
    }
    if (plan[i] === 'retrying') await transitions.retry(attempt, { delayMs: 3_600_000, lastError: '{"code":"T","message":"t"}' });
  }
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

  it('reads only the fields it shows: never memory, outputSchema or the lease', async () => {
    const monitor = await h.redis.monitor();
    track(monitor, async () => monitor.disconnect());
    const seen: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => seen.push(args));
    const res = await acme.get('/runs?status=queued,dispatched&limit=20&agent=echo');
    expect(res.body.runs).toHaveLength(20);
    await new Promise((r) => setTimeout(r, 200));
    monitor.disconnect();
    const onRuns = seen.filter((args) => /:run:/.test(args[1] ?? ''));
    expect(onRuns.length).toBeGreaterThan(0);
    for (const args of onRuns) {
      expect(args[0].toLowerCase(), args.join(' ')).toBe('hmget');
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
      [`status=dispatched&runtime=${h.runtime}`, (r) => r.status === 'dispatched'],
      ['status=dispatched&runtime=elsewhere', () => false],
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
});
