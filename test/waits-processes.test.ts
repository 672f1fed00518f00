import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseRunRecord } from '../src/lib/transitions/record.ts';
import { redisNowMs } from '../src/lib/redis/redis.ts';
import { fx, runEvents, statuses } from './helpers/engine.ts';
import { sleep, useHarness, waitFor, type Harness } from './helpers/harness.ts';

/**
 * Waits against real `baton api` and `baton worker` processes: a waiting run holds no worker,
 * and a wait's timeout fires even when no process was alive at the deadline. Nothing Baton
 * runs in this test process (no API, no worker, no sweeper): every process that could act on
 * a run is a child the test starts and kills.
 */
const AGENTS = fileURLToPath(new URL('./fixtures/wait-agents.ts', import.meta.url));
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

async function runOf(runId: string) {
  return parseRunRecord(await h.redis.hgetall(h.keys.scope('acme').run(runId)));
}

describe('waits across processes', () => {
  it('a waiting run holds no worker: with WORKER_CONCURRENCY=1, 20 runs wait and another session’s run still completes', async () => {
    const api = await h.spawn('api');
    await h.spawn('worker', { agents: [AGENTS], env: { WORKER_CONCURRENCY: '1' } });
    const acme = await h.client(api.url!, 'acme', 'client');
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await acme.submit(`waiter-${i}`, `question ${i}`, { agent: 'fx-ask' })).body.id);
    // One at a time through the one slot: each reaches its wait and gives the slot up.
    for (const id of ids) await acme.waitStatus(id, ['waiting'], 60_000);
    const stats = (await (await h.client(api.url!, 'acme', 'admin')).get(`/runtimes/${h.runtime}/stats`)).body;
    expect(stats.counts).toMatchObject({ waiting: 20, running: 0 });
    expect(await h.redis.zcard(h.keys.scope('acme').leases)).toBe(0);

    const other = (await acme.submit('another-session', 'still served')).body;
    expect((await acme.waitStatus(other.id, ['succeeded'], 30_000)).result.answer).toBe('still served');

    // And every waiting run goes on once resumed, still through the one slot.
    for (const id of ids) expect((await acme.post(`/runs/${id}/waits/wait:answer:1`, { value: id })).status).toBe(200);
    for (const id of ids) {
      const done = await acme.waitStatus(id, ['succeeded', 'failed'], 60_000);
      expect(done.result.answer).toContain(`got "${id}"`);
      expect(await fx(h, id, 'before')).toBe('1');
    }
  }, 180_000);

  it('a wait times out with no process alive at its deadline: the run goes on with WaitTimeoutError once a worker starts', async () => {
    const api = await h.spawn('api');
    const worker = await h.spawn('worker', { agents: [AGENTS] });
    const acme = await h.client(api.url!, 'acme', 'client');
    const run = (await acme.submit('lonely', 'anyone?', { agent: 'fx-ask', metadata: { timeoutMs: 2000 } })).body;
    const waiting = await acme.waitStatus(run.id, ['waiting'], 30_000);
    const deadline = Date.parse(waiting.waits[0].expiresAt);
    await worker.kill('SIGKILL');
    await api.kill('SIGKILL');

    // Nobody is alive: the deadline passes and nothing happens to the run.
    while ((await redisNowMs(h.redis)) < deadline + 1500) await sleep(200);
    expect((await runOf(run.id))?.status).toBe('waiting');
    expect(await h.redis.hexists(h.keys.scope('acme').steps(run.id), 'wait:answer:1')).toBe(0);

    // The first process that comes up sweeps, finds the deadline passed and times the wait out.
    await h.spawn('worker', { agents: [AGENTS], env: { FX_TAG: 'late' } });
    const done = await waitFor(async () => {
      const r = await runOf(run.id);
      return r && ['succeeded', 'failed'].includes(r.status) ? r : undefined;
    }, 30_000, 'the run to end after the late worker started');
    expect(done.status).toBe('succeeded');
    expect(done.result?.answer).toBe('asking; got "timed out (wait:answer:1)" (before=1 after=1 by late)');
    expect(await fx(h, run.id, 'before')).toBe('1');
    const events = await runEvents(h, 'acme', run.id);
    expect(statuses(events)).toEqual(['queued', 'running', 'waiting', 'queued', 'running']);
    expect(events.find((e) => e.data?.wait)?.data.wait).toEqual({ key: 'wait:answer:1', outcome: 'timed-out' });
  }, 120_000);
});
