import { beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../src/client.ts';
import { CLI_TEST_TIMEOUT_MS, runBaton, type CliResult } from './helpers/cli.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Bulk operations (src/lib/engine/operations/bulk-operations.ts): cancel or re-run every run a filter
 * matches, in the background, at BULK_RUNS_PER_SECOND per scope. The API and the worker are
 * real processes' parts on a real Redis; both advance operations, as every process does.
 */
let h: Harness;
let apiUrl: string;
/** Runs on this runtime stay queued: no worker serves it. */
let idle: string;

const SUBMIT_LIMITS = { SUBMIT_RATE_PER_SEC: '100000', SUBMIT_BURST: '100000' };

beforeAll(async () => {
  h = await useHarness(SUBMIT_LIMITS);
  idle = `${h.runtime}-idle`;
  const api = await h.startApi();
  apiUrl = api.url;
  await h.startWorker();
});

/** Submits `n` runs of echo on the idle runtime, one session each, `parallel` at a time. */
async function queueRuns(c: ScopeClient, n: number, prefix: string, parallel = 16): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < n) {
      const i = next++;
      const res = await c.submit(`${prefix}-${i}`, 'stays queued', { runtime: idle, agent: 'echo' });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      ids.push(res.body.id as string);
    }
  }));
  return ids;
}

const statusCount = async (scope: string, status: string) => {
  const sk = h.keys.scope(scope);
  // A run shows queued while queued or dispatched (handed to its worker queue, not claimed).
  const n = await h.redis.zcard(sk.runsByStatus(status));
  return status === 'queued' ? n + await h.redis.zcard(sk.runsByStatus('dispatched')) : n;
};

/** Time from the submit to the first token of a streamed echo run in scope B, and that the run succeeded. */
async function firstTokenMs(b: BatonClient, i: number): Promise<number> {
  const started = performance.now();
  const { runId, events } = await b.submitAndStream({ sessionId: `b-${i}`, input: { content: 'one two three' }, runtime: h.runtime, agent: 'echo' });
  let first: number | undefined;
  let end: unknown;
  for await (const e of events) {
    if (e.type === 'token' && first === undefined) first = performance.now() - started;
    if (e.type === 'end') end = e.data;
  }
  expect(end, runId).toMatchObject({ status: 'succeeded' });
  return first!;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe('bulk cancel', () => {
  it('cancels 2,000 queued runs of one agent in scope A with progress readable throughout, while scope B streams untouched', async () => {
    const a = await h.client(apiUrl, 'bulk-a');
    const bKey = await h.key('bulk-b', 'client');
    const b = new BatonClient({ url: apiUrl, apiKey: bKey, scope: 'bulk-b' });
    const ids = await queueRuns(a, 2000, 'a');
    expect(await statusCount('bulk-a', 'queued')).toBe(2000);

    // Scope B's time to first token before the bulk action (after a few runs that warm the path up).
    for (let i = 0; i < 5; i++) await firstTokenMs(b, 50 + i);
    const before: number[] = [];
    for (let i = 0; i < 15; i++) before.push(await firstTokenMs(b, i));

    const made = await a.post('/runs/cancel', { filter: { agent: 'echo', status: ['queued'] } });
    expect(made.status, JSON.stringify(made.body)).toBe(202);
    expect(made.body).toMatchObject({ kind: 'cancel', status: 'running', matched: 0, done: 0, failed: 0 });
    const opId = made.body.id as string;

    // B keeps streaming while A's operation runs; A's progress is read all the while.
    const during: number[] = [];
    const progress: { matched: number; done: number; status: string }[] = [];
    let running = true;
    const streaming = (async () => {
      for (let i = 100; running; i++) during.push(await firstTokenMs(b, i));
    })();
    const final = await waitFor(async () => {
      const op = (await a.get(`/operations/${opId}`)).body;
      progress.push({ matched: op.matched, done: op.done, status: op.status });
      return op.status === 'done' ? op : undefined;
    }, 40_000, 'the bulk cancel to finish');
    running = false;
    await streaming;

    expect(final).toMatchObject({ matched: 2000, done: 2000, failed: 0, status: 'done' });
    for (let i = 1; i < progress.length; i++) {
      expect(progress[i].matched).toBeGreaterThanOrEqual(progress[i - 1].matched);
      expect(progress[i].done).toBeGreaterThanOrEqual(progress[i - 1].done);
    }
    const partial = progress.filter((p) => p.done > 0 && p.done < 2000);
    expect(partial.length, 'progress read between the start and the end').toBeGreaterThan(0);
    expect(await statusCount('bulk-a', 'cancelled')).toBe(2000);
    expect(await statusCount('bulk-a', 'queued')).toBe(0);
    expect((await a.get(`/runs/${ids[0]}`)).body.status).toBe('cancelled');

    // B: every run succeeded (checked in firstTokenMs), none cancelled.
    expect(during.length).toBeGreaterThan(0);
    expect(await statusCount('bulk-b', 'cancelled')).toBe(0);
    expect(await statusCount('bulk-b', 'succeeded')).toBe(5 + before.length + during.length);
    const ratio = median(during) / median(before);
    console.log(
      `bulk cancel of 2,000 queued runs: ${progress.length} progress reads (${partial.length} partial); ` +
      `scope B time to first token, median of ${before.length} before ${median(before).toFixed(1)} ms, ` +
      `of ${during.length} during ${median(during).toFixed(1)} ms (ratio ${ratio.toFixed(2)})`,
    );
    const listed = (await a.get('/operations')).body.operations;
    expect(listed.map((o: { id: string }) => o.id)).toContain(opId);
  }, 120_000);

  it('stops when the operation is cancelled: the runs it did not reach stay queued, and its counts are the runs it cancelled', async () => {
    const c = await h.client(apiUrl, 'bulk-c');
    await queueRuns(c, 600, 'c');
    const made = await c.post('/runs/cancel', { filter: { runtime: idle } });
    expect(made.status).toBe(202);
    const opId = made.body.id as string;
    await waitFor(async () => ((await c.get(`/operations/${opId}`)).body.done > 0 ? true : undefined), 20_000, 'a first batch');
    const stopped = await c.post(`/operations/${opId}/cancel`, {});
    expect(stopped.status).toBe(200);
    expect(stopped.body.status).toBe('cancelled');
    // A batch under way when it was stopped still counts what it did: wait for the counts to match the runs.
    const op = await waitFor(async () => {
      const now = (await c.get(`/operations/${opId}`)).body;
      return now.done === await statusCount('bulk-c', 'cancelled') ? now : undefined;
    }, 20_000, 'the counts to match the cancelled runs');
    expect(op.status).toBe('cancelled');
    expect(op.done).toBeLessThan(600);
    expect(await statusCount('bulk-c', 'queued')).toBe(600 - op.done);
    // Cancelling it again answers it as it is.
    expect((await c.post(`/operations/${opId}/cancel`, {})).body).toMatchObject({ status: 'cancelled', done: op.done });
  }, 60_000);

  it('takes an admin key to start or stop; a client key reads; filters are checked', async () => {
    const client = await h.client(apiUrl, 'bulk-c', 'client');
    const admin = await h.client(apiUrl, 'bulk-c');
    const refused = await client.post('/runs/cancel', { filter: { agent: 'echo' } });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('FORBIDDEN');
    expect((await client.post('/runs/rerun', { filter: { agent: 'echo' } })).status).toBe(403);
    const [op] = (await client.get('/operations')).body.operations;
    expect((await client.get(`/operations/${op.id}`)).status).toBe(200);
    expect((await client.post(`/operations/${op.id}/cancel`, {})).status).toBe(403);
    expect((await client.get('/operations/opnosuchthing')).body.error.code).toBe('OPERATION_NOT_FOUND');

    const bodies = [
      {}, { filter: {} }, { filter: { status: ['nope'] } }, { filter: { status: ['succeeded'] } }, { filter: { agent: 'echo' }, allowNonIdempotent: true },
    ];
    for (const body of bodies) {
      const bad = await admin.post('/runs/cancel', body);
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(bad.body.error.code).toBe('VALIDATION_FAILED');
    }
    const queuedRerun = await admin.post('/runs/rerun', { filter: { status: ['queued'] } });
    expect(queuedRerun.status).toBe(400);
  });
});

describe('a process killed mid-batch', () => {
  it('leaves its lease to run out; another process does the batch again, and each run is counted once', async () => {
    const f = await h.client(apiUrl, 'bulk-f');
    await queueRuns(f, 150, 'f');
    // An operation as a process that claimed its first batch and died would leave it: a lease
    // held by a token no process has, running out in a second, and no count yet.
    const sk = h.keys.scope('bulk-f');
    const [sec, micro] = await h.redis.time();
    const now = Number(sec) * 1000 + Math.floor(Number(micro) / 1000);
    const id = 'opkilledmidbatch';
    await h.redis.hset(sk.operation(id), {
      id, scope: 'bulk-f', kind: 'cancel', status: 'running', filter: JSON.stringify({ runtime: idle }), allowNonIdempotent: '0',
      matched: '0', done: '0', failed: '0', createdAt: String(now), before: String(now + 1), cursor: `${now}_~`,
      lease: 'a-dead-process', leaseUntil: String(now + 1000),
    });
    await h.redis.zadd(sk.operations, now, id);
    await h.redis.zadd(sk.operationsActive, now, id);
    await h.redis.sadd(h.keys.operationScopes, 'bulk-f');
    const op = await waitFor(async () => {
      const got = (await f.get(`/operations/${id}`)).body;
      return got.status === 'done' ? got : undefined;
    }, 20_000, 'the operation after the lease ran out');
    expect(op).toMatchObject({ matched: 150, done: 150, failed: 0 });
    expect(await statusCount('bulk-f', 'cancelled')).toBe(150);
    expect(await statusCount('bulk-f', 'queued')).toBe(0);
  }, 60_000);
});

describe('bulk re-run', () => {
  it('re-runs each matching ended run once, even when a batch is done again', async () => {
    const d = await h.client(apiUrl, 'bulk-d');
    const ids = await queueRuns(d, 3, 'd', 1);
    for (const id of ids) expect((await d.post(`/runs/${id}/cancel`, {})).body.status).toBe('cancelled');
    // A run of another session that ended too, which the filter leaves out.
    const other = (await d.submit('d-other', 'left alone', { runtime: h.runtime, agent: 'echo' })).body.id as string;
    await d.waitStatus(other, ['succeeded']);

    const made = await d.post('/runs/rerun', { filter: { runtime: idle, status: ['cancelled'] } });
    expect(made.status, JSON.stringify(made.body)).toBe(202);
    const opId = made.body.id as string;
    const done = await waitFor(async () => {
      const op = (await d.get(`/operations/${opId}`)).body;
      return op.status === 'done' ? op : undefined;
    }, 20_000, 'the bulk re-run');
    expect(done).toMatchObject({ matched: 3, done: 3, failed: 0 });
    const rerunsOf = async (id: string) => ((await d.get(`/runs/${id}`)).body.reruns ?? []) as string[];
    const first = await Promise.all(ids.map(rerunsOf));
    expect(first.map((r) => r.length)).toEqual([1, 1, 1]);
    expect(await rerunsOf(other)).toEqual([]);

    // As if the process that did the batch died before committing it: the operation runs
    // again from its first cursor, and each re-run's idempotency key answers with the same run.
    const sk = h.keys.scope('bulk-d');
    const rec = await h.redis.hgetall(sk.operation(opId));
    await h.redis.hset(sk.operation(opId), { status: 'running', cursor: `${Number(rec.before) - 1}_~`, matched: '0', done: '0' });
    await h.redis.persist(sk.operation(opId));
    await h.redis.zadd(sk.operationsActive, rec.createdAt, opId);
    await h.redis.sadd(h.keys.operationScopes, 'bulk-d');
    const again = await waitFor(async () => {
      const op = (await d.get(`/operations/${opId}`)).body;
      return op.status === 'done' ? op : undefined;
    }, 20_000, 'the bulk re-run done again');
    expect(again).toMatchObject({ matched: 3, done: 3, failed: 0 });
    expect(await Promise.all(ids.map(rerunsOf))).toEqual(first);
    for (const [rerun] of first) expect((await d.get(`/runs/${rerun}`)).body.status).toBe('queued');
    // A re-run comes in by the door every run takes (submissions.ts): the registry's warning
    // that no worker serves the idle runtime is on its first status event, as on the API's.
    for (const [rerun] of first) {
      const [[, fields]] = await h.redis.xrange(sk.events(rerun!), '-', '+', 'COUNT', 1);
      expect(JSON.parse(fields![fields!.indexOf('data') + 1]!).warnings).toEqual([expect.stringContaining('no live worker serves runtime')]);
    }
  }, 60_000);
});

describe('the client and the CLI', () => {
  it('bulkCancel, getOperation and listOperations; `baton bulk cancel --follow` prints the progress to the end', async () => {
    const e = await h.client(apiUrl, 'bulk-e');
    await queueRuns(e, 4, 'e', 1);
    const baton = new BatonClient({ url: apiUrl, apiKey: await h.key('bulk-e', 'admin'), scope: 'bulk-e' });
    const op = await baton.bulkCancel({ sessionId: 'e-0' });
    const done = await waitFor(async () => {
      const now = await baton.getOperation(op.id);
      return now.status === 'done' ? now : undefined;
    }, 20_000, 'the client\'s bulk cancel');
    expect(done).toMatchObject({ matched: 1, done: 1, failed: 0 });
    expect((await baton.listOperations()).operations.map((o) => o.id)).toEqual([op.id]);

    const cli = await runCli(['bulk', 'cancel', '--runtime', idle, '--status', 'queued', '--follow']);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/cancel {2}done {2}matched 3 {2}done 3 {2}failed 0/);
    expect(await statusCount('bulk-e', 'cancelled')).toBe(4);
    const bad = await runCli(['bulk', 'cancel', '--status', 'nope']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--status: nope');
    const listed = await runCli(['bulk', 'list', '--json']);
    expect(JSON.parse(listed.stdout).operations).toHaveLength(2);
  }, CLI_TEST_TIMEOUT_MS);
});

/** Runs `baton <args>` against this file's API as scope bulk-e's admin; resolves with its exit code and output. */
async function runCli(args: string[]): Promise<CliResult> {
  return runBaton(args, { BATON_URL: apiUrl, BATON_API_KEY: await h.key('bulk-e', 'admin'), BATON_SCOPE: 'bulk-e' });
}
