import { Queue, Worker } from 'bullmq';
import { beforeAll, describe, expect, it } from 'vitest';
import { Dispatcher, jobId } from '../src/lib/engine/dispatcher.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { Sweeper } from '../src/lib/engine/sweeper.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { runEvents, statuses } from './helpers/engine.ts';
import { track } from './helpers/resources.ts';

/**
 * Invariant 1's safety net: runs whose BullMQ job is gone (never added, deleted, failed by
 * BullMQ) and running runs whose lease expired with no job left to deliver them are
 * re-dispatched by the sweeper, which every process runs at once without a leader.
 */
let h: Harness;
let acme: ScopeClient;
let queue: Queue;

beforeAll(async () => {
  h = await useHarness();
  // No sweeper in the API process: each test decides when a sweeper runs (its worker's).
  const api = await h.startApi({ SWEEP_INTERVAL_MS: '0' });
  acme = await h.client(api.url, 'acme');
  queue = new Queue('echo', { connection: h.redis, prefix: h.keys.queuePrefix(h.runtime) });
  track(queue, () => queue.close());
});

const record = (runId: string) => h.redis.hgetall(h.keys.scope('acme').run(runId));

/** Submits a run while no worker serves the runtime, then deletes its BullMQ job by hand. */
async function submitAndLoseJob(sessionId: string, content: string): Promise<string> {
  const runId = (await acme.submit(sessionId, content)).body.id as string;
  const id = jobId(runId, 1);
  expect(await queue.getJobState(id)).toBe('waiting');
  await queue.remove(id);
  expect(await queue.getJobState(id)).toBe('unknown');
  return runId;
}

describe('sweeper', () => {
  it('re-dispatches a run whose BullMQ job was deleted by hand', async () => {
    const runId = await submitAndLoseJob('sw-lost', 'lost and found');
    const lostAt = Date.now();
    await h.startWorker();
    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 20_000);
    console.log(`[engine-sweeper] deleted job -> run succeeded after ${Date.now() - lostAt} ms (DISPATCH_GRACE_MS ${h.config.DISPATCH_GRACE_MS}, SWEEP_INTERVAL_MS ${h.config.SWEEP_INTERVAL_MS})`);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 0, result: { answer: 'lost and found' } });
    expect((await record(runId)).dispatch).toBe('2');
  });

  it('re-dispatches a run whose job BullMQ failed (stall limit)', async () => {
    const runId = (await acme.submit('sw-failed', 'failed by bullmq')).body.id as string;
    // A bare BullMQ worker fails the job the way BullMQ does after too many stalls.
    const conn = createRedis({ url: h.redisUrl, name: 'bare-bullmq', blocking: true });
    const bare = new Worker('echo', async () => { throw new Error('job stalled more than allowable limit'); }, {
      connection: conn, prefix: h.keys.queuePrefix(h.runtime),
    });
    try {
      await waitFor(async () => (await queue.getJobState(jobId(runId, 1))) === 'failed', 10_000, 'bullmq to fail the job');
    } finally {
      await bare.close();
      await conn.quit();
    }
    await h.startWorker();
    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 20_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'failed by bullmq' } });
  });

  it('takes over a running run whose holder died and whose job is gone; a cancel waiting for it lands', async () => {
    const orphan = await submitAndLoseJob('sw-orphan', 'orphaned');
    const cancelled = await submitAndLoseJob('sw-orphan-c', 'cancel me while orphaned');
    // A worker that claimed both runs and died: leases that nobody renews, no job left.
    for (const id of [orphan, cancelled]) {
      expect((await h.gateways().worker.claim({ scope: 'acme', runId: id }, 'ghost-worker', {})).kind).toBe('claimed');
    }
    const res = await acme.post(`/runs/${cancelled}/cancel`);
    expect(res.body).toMatchObject({ status: 'running', cancelRequested: true });

    await h.startWorker();
    const run = await acme.waitStatus(orphan, ['succeeded', 'failed'], 20_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 1, result: { answer: 'orphaned' } });
    expect(statuses(await runEvents(h, 'acme', orphan))).toEqual(['queued', 'running', 'recovered']);
    const c2 = await acme.waitStatus(cancelled, ['cancelled', 'succeeded', 'failed'], 20_000);
    expect(c2).toMatchObject({ status: 'cancelled', result: { finishReason: 'cancelled' } });
  });

  it('sweeps safely from many processes at once: one repair, one new job', async () => {
    const runId = await submitAndLoseJob('sw-many', 'swept once');
    const sk = h.keys.scope('acme');
    // Due once its dispatch grace has passed (the outbox deadline, in Redis time).
    await waitFor(async () => {
      const [secs] = await h.redis.time();
      return Number(await h.redis.zscore(sk.leases, runId)) <= Number(secs) * 1000;
    }, 10_000, 'the dispatch deadline to pass');
    const log = createLogger('silent');
    const dispatchers = [0, 1, 2, 3].map(() => new Dispatcher(h.redis, h.keys));
    const sweepers = dispatchers.map((d) => new Sweeper(h.redis, h.keys, h.config, d, gateways(h.redis, h.keys, h.config, d).sweeper, log));
    try {
      const repaired = await Promise.all(sweepers.map((s) => s.sweep()));
      expect(repaired.reduce((a, b) => a + b, 0)).toBe(1);
    } finally {
      await Promise.all(dispatchers.map((d) => d.close()));
    }
    expect((await record(runId)).dispatch).toBe('2');
    expect(await queue.getJobState(jobId(runId, 2))).toBe('waiting');
    expect(await queue.getJobState(jobId(runId, 3))).toBe('unknown');
    await h.startWorker();
    expect((await acme.waitStatus(runId, ['succeeded'], 20_000)).result.answer).toBe('swept once');
  });
});
