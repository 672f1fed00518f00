import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { Dispatcher, PARTITIONS_TTL_MS, jobId, partitionOf } from '../src/lib/engine/dispatcher.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * A runtime's queues split into partitions (QUEUE_PARTITIONS): each agent's queue is one
 * BullMQ queue per partition, a run's job in partitionOf(runId), every partition consumed by
 * every worker, the count recorded per runtime and never lowered.
 */
let h: Harness;
let acme: ScopeClient;
let apiUrl: string;

beforeAll(async () => {
  h = await useHarness();
  apiUrl = (await h.startApi()).url;
  acme = await h.client(apiUrl, 'acme');
});

/** The ids of the jobs BullMQ added to partition `p` of the echo agent's queue (its events stream). */
async function addedIn(p: number): Promise<string[]> {
  const entries = await h.redis.xrange(`${h.keys.queuePrefix(h.runtime, p)}:echo:events`, '-', '+');
  return entries.map(([, f]) => Object.fromEntries(f.flatMap((_, i) => (i % 2 ? [] : [[f[i], f[i + 1]]]))))
    .filter((e) => e.event === 'added').map((e) => e.jobId);
}

const recorded = async () => Number(await h.redis.zscore(h.keys.queuePartitions, h.runtime));

describe('queue partitions', () => {
  it('keep one key prefix for partition 0 (the queues of before) and a hash tag of their own for the others', () => {
    expect(h.keys.queuePrefix(h.runtime)).toBe(`${h.prefix}:q:{${h.runtime}}:agent`);
    expect(h.keys.queuePrefix(h.runtime, 0)).toBe(h.keys.queuePrefix(h.runtime));
    expect(h.keys.queuePrefix(h.runtime, 2)).toBe(`${h.prefix}:q:{${h.runtime}:2}:agent`);
    expect(() => h.keys.queuePrefix(h.runtime, -1)).toThrow();
    expect(() => h.keys.queuePrefix(h.runtime, 1.5)).toThrow();
    // Spread: 3,000 ids over 4 partitions, each within a fifth of its even share.
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 3000; i++) counts[partitionOf(`run-${i}-x`, 4)]++;
    for (const c of counts) expect(Math.abs(c - 750)).toBeLessThan(150);
    expect(partitionOf('anything', 1)).toBe(0);
  });

  it('spread a runtime\'s runs over its partitions; each run once, each job in its run\'s partition', async () => {
    const w = await h.startWorker({ env: { QUEUE_PARTITIONS: '3' } });
    expect(await recorded()).toBe(3);
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) ids.push((await acme.submit(`spread-${i}`, `hello ${i}`)).body.id);
    for (const id of ids) expect((await acme.waitStatus(id, ['succeeded'])).result.answer).toMatch(/^hello \d+$/);
    const added = await Promise.all([0, 1, 2].map(addedIn));
    // Every run's one job, in the partition its id picks; every partition got some.
    expect(added.flat().sort()).toEqual(ids.map((id) => jobId(id, 1)).sort());
    for (const [p, jobs] of added.entries()) {
      expect(jobs.length).toBeGreaterThan(0);
      for (const job of jobs) expect(partitionOf(job.replace(/-1$/, ''), 3)).toBe(p);
    }
    await w.close();
  });

  it('are raised by a worker\'s start, never lowered, and consumed by a worker started before the raise', async () => {
    // Started with the count at 3: it consumes 3.
    const early = await h.startWorker();
    const late = await h.startWorker({ env: { QUEUE_PARTITIONS: '5' } });
    expect(await recorded()).toBe(5);
    await late.close();
    // A worker that asks for fewer does not lower it.
    const few = await h.startWorker({ env: { QUEUE_PARTITIONS: '2' } });
    expect(await recorded()).toBe(5);
    await few.close();
    // Only `early` is left, and the API's count is 5 once it read it again: runs in partitions
    // 3 and 4 need `early` to have read it too.
    await sleep(PARTITIONS_TTL_MS + 100);
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await acme.submit(`raised-${i}`, `again ${i}`)).body.id);
    for (const id of ids) await acme.waitStatus(id, ['succeeded']);
    const inNew = (await Promise.all([3, 4].map(addedIn))).flat();
    expect(inNew.sort()).toEqual(ids.filter((id) => partitionOf(id, 5) >= 3).map((id) => jobId(id, 1)).sort());
    expect(inNew.length).toBeGreaterThan(0);
    await early.close();
  });

  it('a job added before the count grew is found where it went, not added again', async () => {
    const dispatcher = new Dispatcher(h.redis, h.keys);
    const rt = `${h.runtime}-none`;
    // An id whose partition under 4 is not 0, so finding it means looking past its own.
    const runId = Array.from({ length: 50 }, (_, i) => `moved-${i}`).find((id) => partitionOf(id, 4) !== 0)!;
    await dispatcher.dispatch('acme', [[runId, rt, 1, 0, 'echo']]);
    expect(await dispatcher.findJob(rt, 'echo', runId, 1).then((j) => j.state)).toBe('waiting');
    await dispatcher.raisePartitions(rt, 4);
    const found = await dispatcher.findJob(rt, 'echo', runId, 1);
    expect(found.state).toBe('waiting');
    expect(found.queue.opts.prefix).toBe(h.keys.queuePrefix(rt, 0));
    const missing = await dispatcher.findJob(rt, 'echo', runId, 2);
    expect([missing.state, missing.queue.opts.prefix]).toEqual(['unknown', h.keys.queuePrefix(rt, partitionOf(runId, 4))]);
    expect((await dispatcher.jobCounts(rt, ['waiting'])).waiting).toBe(0); // no worker ever offered `echo` on it
    await h.redis.hset(h.keys.runtimeAgents(rt), 'echo', String(Date.now()));
    expect((await dispatcher.jobCounts(rt, ['waiting'])).waiting).toBe(1);
    await dispatcher.close();
  });
});

it('a worker reads the count again every heartbeat: a partition added after its start is consumed', async () => {
  const w = await h.startWorker();
  const n = (await recorded()) + 1;
  await h.redis.zadd(h.keys.queuePartitions, 'GT', n, h.runtime);
  await sleep(PARTITIONS_TTL_MS + 100);
  // Runs until one's job went to the new partition: it succeeds only if the worker consumes it.
  let landed: string | undefined;
  for (let i = 0; i < 200 && !landed; i++) {
    const id = (await acme.submit(`newest-${i}`, 'newest partition')).body.id;
    if (partitionOf(id, n) !== n - 1) continue;
    expect((await acme.waitStatus(id, ['succeeded'])).result.answer).toBe('newest partition');
    landed = id;
  }
  expect(await addedIn(n - 1)).toContain(jobId(landed!, 1));
  await w.close();
});

/** Holds its run 100 ms and notes, in this process, the order runs started in. */
const started: string[] = [];
const holdBriefly = defineAgent({
  name: 'part-hold',
  async run(ctx) {
    started.push(ctx.runId);
    await sleep(100);
    return 'held';
  },
});

it('a worker with one slot and a backlog in every partition takes them in turn: no partition waits behind another\'s backlog', async () => {
  // A scope whose active-run limit holds no run back, so that every run is in a queue before the
  // worker starts (see below) and the order they start in is the worker's alone.
  await h.redis.hset(h.keys.scope('turns').limits, { maxActive: 1000 });
  const turns = await h.client(apiUrl, 'turns');
  // Once with the agent, so the runtime offers it; then the backlog, built with no worker up.
  const offer = await h.startWorker({ agents: [holdBriefly], env: { QUEUE_PARTITIONS: '3' } });
  await offer.close();
  const n = await recorded();
  expect(n).toBeGreaterThanOrEqual(3);
  const ids: string[] = [];
  const perPartition = Array<number>(n).fill(0);
  for (let i = 0; Math.min(...perPartition) < 5 && i < 500; i++) {
    const id = (await turns.submit(`turns-${i}`, 'x', { agent: 'part-hold' })).body.id;
    perPartition[partitionOf(id, n)]++;
    ids.push(id);
  }
  expect(Math.min(...perPartition)).toBe(5);
  // The scope's slots are at most the live workers' (the fair share's capacity): runs submitted
  // while the closed worker's 16 were still counted wait in the scope's line until a fair share
  // pass without it dispatches them, in the line's order. The worker starts once every run's
  // job is in its partition's queue, so the order runs start in is the worker's alone.
  const waiting = async () => (await Promise.all(perPartition.map((_, p) => h.redis.llen(`${h.keys.queuePrefix(h.runtime, p)}:part-hold:wait`))))
    .reduce((a, b) => a + b, 0);
  await waitFor(async () => (await waiting()) === ids.length || undefined, 15_000, 'every run\'s job in its partition\'s queue');
  const w = await h.startWorker({ agents: [holdBriefly], env: { WORKER_CONCURRENCY: '1' } });
  for (const id of ids) await turns.waitStatus(id, ['succeeded']);
  await w.close();
  const order = started.filter((id) => ids.includes(id)).map((id) => partitionOf(id, n));
  expect(order.length).toBe(ids.length);
  // Up to the start that took the last run of some partition, every partition had runs
  // waiting: in that stretch each 2n starts in a row take every partition (in one queue, or
  // with a partition drained before the next, one partition's backlog would go first).
  const left = [...perPartition];
  let stretch = 0;
  while (stretch < order.length && left[order[stretch]] > 1) left[order[stretch++]]--;
  console.log(`[queue-partitions] ${n} partitions, one slot: starts by partition ${order.join(',')}`);
  // Each partition's consumer took its first run within the first two rounds (one may come
  // up a little after the others), and at least five rounds' worth of runs started in turn.
  expect(Math.max(...perPartition.map((_, p) => order.indexOf(p))), `starts ${order.join(',')}`).toBeLessThan(2 * n);
  expect(stretch, `starts ${order.join(',')}`).toBeGreaterThanOrEqual(3 * n);
  for (let i = 0; i + 2 * n <= stretch; i++) expect(new Set(order.slice(i, i + 2 * n)).size, `starts ${order.join(',')}`).toBe(n);
});
