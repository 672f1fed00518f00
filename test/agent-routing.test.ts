import { beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { jobId } from '../src/lib/engine/dispatcher.ts';
import { track } from './helpers/resources.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Runs are routed by agent: each runtime has a queue per agent, and a worker takes only from
 * the queues of the agents it serves. Two workers of one runtime with different agents each
 * run only their own; a run of an agent no worker serves waits queued until one starts, and
 * fails UNKNOWN_AGENT only after AGENT_GRACE_MS without one. (Agents the runtime never offered
 * are submitted with awaitAgent: without it they are refused at once, test/unknown-agent.test.ts.)
 */
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

/** An agent that answers with the worker it ran on, after a short pause (so runs overlap). */
const tagged = (name: string, worker: string) =>
  defineAgent({
    name,
    async run(ctx) {
      await new Promise((r) => setTimeout(r, 20));
      return `${name}:${ctx.input.content} on ${worker}`;
    },
  });

describe('routing by agent', () => {
  let acme: ScopeClient;

  it('delivers each run to a worker that serves its agent; an unserved agent waits for one', async () => {
    const api = await h.startApi();
    acme = await h.client(api.url, 'acme', 'client');
    await h.startWorker({ agents: [tagged('alpha', 'A')], env: { WORKER_CONCURRENCY: '4' } });
    await h.startWorker({ agents: [tagged('beta', 'B')], env: { WORKER_CONCURRENCY: '4' } });

    const submitted: { id: string; agent: string; n: number }[] = [];
    for (let n = 0; n < 20; n++) {
      for (const agent of ['alpha', 'beta']) {
        const r = await acme.submit(`${agent}-${n}`, String(n), { agent });
        expect(r.status).toBe(202);
        expect(r.body.warnings).toBeUndefined();
        submitted.push({ id: r.body.id, agent, n });
      }
    }
    for (const s of submitted) {
      const run = await acme.waitStatus(s.id, ['succeeded', 'failed']);
      expect(run.status).toBe('succeeded');
      expect(run.result.answer).toBe(`${s.agent}:${s.n} on ${s.agent === 'alpha' ? 'A' : 'B'}`);
    }

    // No worker offered gamma yet: the submit that says it will come is accepted with a warning and the run waits.
    const r = await acme.submit('gamma-1', 'late', { agent: 'gamma', awaitAgent: true });
    expect(r.status).toBe(202);
    expect(r.body.warnings).toHaveLength(1);
    expect(r.body.warnings[0]).toContain(`no worker of runtime "${h.runtime}" offered agent "gamma" in the last day`);
    expect(r.body.warnings[0]).toContain('"gamma"');
    // Past the dispatch grace, a few sweeps and a submit of each other agent: still queued.
    await new Promise((res) => setTimeout(res, Number(h.config.DISPATCH_GRACE_MS) + 4 * Number(h.config.SWEEP_INTERVAL_MS)));
    expect((await acme.get(`/runs/${r.body.id}`)).body.status).toBe('queued');
    const stats = (await (await h.client(api.url, 'acme', 'admin')).get(`/runtimes/${h.runtime}/stats`)).body;
    expect(stats.unservedAgents).toEqual([expect.objectContaining({ agent: 'gamma', runs: 1 })]);

    await h.startWorker({ agents: [tagged('gamma', 'C')] });
    const run = await acme.waitStatus(r.body.id, ['succeeded', 'failed']);
    expect(run).toMatchObject({ status: 'succeeded', result: { answer: 'gamma:late on C' } });
    await api.close();
  });

  it('one WORKER_CONCURRENCY is shared by the queues of all the agents a worker serves', async () => {
    const api = await h.startApi();
    const client = await h.client(api.url, 'acme', 'client');
    let now = 0;
    let most = 0;
    const held = (name: string) => defineAgent({
      name,
      async run(ctx) {
        most = Math.max(most, ++now);
        await new Promise((r) => setTimeout(r, 150));
        now--;
        return `${name}:${ctx.input.content}`;
      },
    });
    const w = await h.startWorker({ agents: [held('one'), held('two'), held('three')], env: { WORKER_CONCURRENCY: '2' } });
    const ids: string[] = [];
    for (let n = 0; n < 12; n++) ids.push((await client.submit(`share-${n}`, String(n), { agent: ['one', 'two', 'three'][n % 3] })).body.id);
    for (const id of ids) expect((await client.waitStatus(id, ['succeeded', 'failed'])).status).toBe('succeeded');
    expect(most).toBe(2);
    expect(w.inFlight).toBe(0);
    await api.close();
  });

  it('fails a run UNKNOWN_AGENT once no worker served its agent for AGENT_GRACE_MS, and drops its job', async () => {
    const api = await h.startApi({ AGENT_GRACE_MS: '2500' });
    const client = await h.client(api.url, 'acme', 'client');
    const r = await client.submit('nobody-1', 'hello?', { agent: 'nobody', awaitAgent: true });
    expect(r.status).toBe(202);
    expect(r.body.warnings[0]).toContain('fails UNKNOWN_AGENT if none starts within 3 s');
    const queue = new Queue('nobody', { connection: h.redis, prefix: h.keys.queuePrefix(h.runtime) });
    track(queue, () => queue.close());
    expect(await queue.getJobState(jobId(r.body.id, 1))).toBe('waiting');

    const run = await client.waitStatus(r.body.id, ['failed', 'succeeded'], 20_000);
    // The grace is the sweeper's decision, read from the run's own stamps (not a clock here).
    const waited = Date.parse(run.finishedAt) - Date.parse(run.createdAt);
    console.log(`[agent-routing] unserved run failed ${waited} ms after its submit (AGENT_GRACE_MS 2500, DISPATCH_GRACE_MS ${h.config.DISPATCH_GRACE_MS})`);
    expect(waited).toBeGreaterThanOrEqual(2500);
    expect(run.status).toBe('failed');
    expect(run.lastError.code).toBe('UNKNOWN_AGENT');
    expect(run.lastError.message).toContain('"nobody"');
    await waitFor(async () => (await queue.getJobState(jobId(r.body.id, 1))) === 'unknown', 5_000, 'the job to go');
    // The session moves on: its next run is not held behind the failed one.
    await h.startWorker();
    const next = await client.submit('nobody-1', 'again', { agent: 'echo' });
    expect((await client.waitStatus(next.body.id, ['succeeded'])).result.answer).toBe('again');
    await api.close();
  });
});
