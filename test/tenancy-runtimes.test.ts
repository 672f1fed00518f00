import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * The runtimes registry: workers register their runtime, agents and concurrency and keep it
 * fresh; the API lists them, and accepts runs of an agent no live worker offers, or for a
 * runtime without live workers, with a warning (they wait).
 */
let h: Harness;
let url: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  url = (await h.startApi()).url;
  acme = await h.client(url, 'acme', 'client');
});

const runtimeOf = async (id: string) => ((await acme.get('/runtimes')).body.runtimes as any[]).find((r) => r.runtimeId === id);
const shout = defineAgent({ name: 'shout', run: (ctx) => ctx.input.content.toUpperCase() });

describe('GET /v1/scopes/{scope}/runtimes', () => {
  it('lists each runtime with its live workers, their agents and concurrency', async () => {
    await h.startWorker({ agents: [shout], env: { WORKER_CONCURRENCY: '3' } });
    await h.startWorker({ env: { WORKER_CONCURRENCY: '5' } });
    const rt = await runtimeOf(h.runtime);
    const agents = [...builtinAgents(h.config).map((a) => a.name), 'shout'].sort();
    expect(rt).toMatchObject({ runtimeId: h.runtime, liveWorkers: 2, agents, concurrency: 8, draining: false });
    expect(Date.parse(rt.lastSeenAt)).toBeGreaterThan(0);
  });

  it('forgets a closed worker at once and a killed one after its lease time', async () => {
    const rt = `${h.runtime}-k`;
    const child = await h.spawn('worker', { env: { RUNTIME: rt } });
    const closing = await h.startWorker({ env: { RUNTIME: rt } });
    expect((await runtimeOf(rt)).liveWorkers).toBe(2);
    await closing.close();
    expect((await runtimeOf(rt)).liveWorkers).toBe(1);
    const killedAt = Date.now();
    await child.kill('SIGKILL');
    await waitFor(async () => (await runtimeOf(rt)).liveWorkers === 0, 15_000, 'the killed worker to stop counting');
    console.log(`killed worker left the live list after ${Date.now() - killedAt} ms (LEASE_MS ${h.config.LEASE_MS})`);
    expect(await runtimeOf(rt)).toMatchObject({ liveWorkers: 0, agents: [], concurrency: 0 });
  });
});

describe('submit and the registry', () => {
  it('accepts a run of an agent the live workers do not offer, with a warning: it waits for one', async () => {
    await h.startWorker();
    const r = await acme.submit('s1', 'hi', { agent: 'shout' });
    expect(r.status).toBe(202);
    expect(r.body.status).toBe('queued');
    expect(r.body.warnings).toHaveLength(1);
    expect(r.body.warnings[0]).toMatch(/^no live worker of runtime ".+" serves agent "shout" \(they offer .*"echo".*\); the run stays queued until one does \(it fails UNKNOWN_AGENT if none starts within 10 min\)$/);
    await acme.post(`/runs/${r.body.id}/cancel`);
  });

  it('accepts the agent once a worker that offers it is live', async () => {
    await h.startWorker({ agents: [shout] });
    const r = await acme.submit('s2', 'quiet words', { agent: 'shout' });
    expect(r.status).toBe(202);
    expect(r.body.warnings).toBeUndefined();
    expect((await acme.waitStatus(r.body.id, ['succeeded'])).result.answer).toBe('QUIET WORDS');
  });

  it('accepts a run for a runtime with no live worker, with a warning, and runs it when one comes', async () => {
    const rt = `${h.runtime}-later`;
    const r = await acme.submit('s3', 'patience', { runtime: rt });
    expect(r.status).toBe(202);
    expect(r.body.status).toBe('queued');
    expect(r.body.warnings).toEqual([
      `no live worker serves runtime "${rt}"; the run stays queued until one with agent "echo" starts (it fails UNKNOWN_AGENT if none starts within 10 min)`,
    ]);
    await h.startWorker({ env: { RUNTIME: rt } });
    await acme.waitStatus(r.body.id, ['succeeded']);
  });
});
