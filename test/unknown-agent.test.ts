import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { runBaton } from './helpers/cli.ts';
import { useHarness, type Harness } from './helpers/harness.ts';

/**
 * A typo in an agent name fails fast: a submit for an agent that no worker of its runtime
 * offered in the last day, while that runtime's workers were seen in it, is refused with
 * 422 UNKNOWN_AGENT naming the runtime's agents, and writes nothing. `awaitAgent: true` (or
 * UNKNOWN_AGENT_SUBMIT=queue) queues it; a runtime with no worker seen accepts every agent
 * with a warning; and a queued run's stream carries the warnings its submit was given.
 */
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

const hello = defineAgent({ name: 'hello', run: async (ctx) => `hello, ${ctx.input.content}` });

/** The scope's keys: a refused submit adds none and changes none of the ones there. */
async function scopeState(scope: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const key of (await h.allKeys()).filter((k) => k.includes(`{${scope}}`)).sort()) {
    // DUMP covers every type; a key rewritten with other contents dumps otherwise.
    out[key] = (await h.redis.dumpBuffer(key))?.toString('base64') ?? '';
  }
  return out;
}

describe('a submit for an agent its runtime does not have', () => {
  it('is refused 422 UNKNOWN_AGENT naming the runtime\'s agents, with no run stored and no key written', async () => {
    // No submit rate-limit bucket: it expires by itself once full, which would look like a change.
    const api = await h.startApi({ SUBMIT_RATE_PER_SEC: '0' });
    const client = await h.client(api.url, 'typo', 'client');
    await h.startWorker({ agents: [hello] });
    // A run of the scope first, so its keys exist and "nothing written" means something.
    const ok = await client.submit('s-1', 'world', { agent: 'hello' });
    expect(ok.status).toBe(202);
    expect((await client.waitStatus(ok.body.id, ['succeeded'])).result.answer).toBe('hello, world');

    // The finished run's last writes (its lease and session cleared, its stream's expiry) are
    // done once two reads of the scope's keys agree.
    let before = await scopeState('typo');
    for (let same = false; !same;) {
      await new Promise((r) => setTimeout(r, 200));
      const again = await scopeState('typo');
      same = JSON.stringify(again) === JSON.stringify(before);
      before = again;
    }
    const refused = [];
    for (let i = 0; i < 10; i++) refused.push(await client.submit(`s-${i}`, 'world', { agent: 'helo' }));
    // With Accept: text/event-stream too: the answer is the refusal, not a stream.
    const streamed = await fetch(`${api.url}/v1/scopes/typo/runs`, {
      method: 'POST',
      headers: { ...client.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ sessionId: 's-sse', input: { content: 'world' }, runtime: h.runtime, agent: 'helo' }),
    });
    const streamedBody = await streamed.json();

    for (const r of [...refused, { status: streamed.status, body: streamedBody }]) {
      expect(r.status).toBe(422);
      expect(r.body.error.code).toBe('UNKNOWN_AGENT');
      expect(r.body.error.message).toContain(`No worker of runtime "${h.runtime}" offered agent "helo" in the last day`);
      expect(r.body.error.message).toContain('"awaitAgent": true');
      expect(r.body.error.details).toEqual([{
        path: 'body.agent', message: `runtime "${h.runtime}" has no agent "helo"; it has "chat", "echo", "hello"`,
      }]);
    }
    // Counted, not timed: eleven refusals made no run and wrote no key of the scope.
    const after = await scopeState('typo');
    expect(Object.keys(after)).toEqual(Object.keys(before));
    expect(after).toEqual(before);
    const runs = (await client.get('/runs')).body.runs;
    expect(runs.map((r: { id: string }) => r.id)).toEqual([ok.body.id]);
    await api.close();
  });

  it('spends no submit rate-limit token: after ten refusals the scope\'s burst of two is whole', async () => {
    const api = await h.startApi({ SUBMIT_RATE_PER_SEC: '0.001', SUBMIT_BURST: '2' });
    const client = await h.client(api.url, 'tokens', 'client');
    await h.startWorker({ agents: [hello] });
    for (let i = 0; i < 10; i++) expect((await client.submit(`s-${i}`, 'x', { agent: 'helo' })).status).toBe(422);
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await client.submit(`t-${i}`, 'x', { agent: 'hello' })).status);
    expect(statuses).toEqual([202, 202, 429]);
    await api.close();
  });

  it('queues with awaitAgent: true, carries the warning on the stream, and runs once a worker offers the agent', async () => {
    const api = await h.startApi();
    const client = await h.client(api.url, 'later', 'client');
    await h.startWorker({ agents: [hello] });
    const r = await client.submit('s-1', 'soon', { agent: 'greeter', awaitAgent: true });
    expect(r.status).toBe(202);
    const warning = `no worker of runtime "${h.runtime}" offered agent "greeter" in the last day (its agents: "chat", "echo", "hello"); ` +
      'the run stays queued until one does (it fails UNKNOWN_AGENT if none starts within 10 min)';
    expect(r.body.warnings).toEqual([warning]);
    expect(r.body.status).toBe('queued');

    // A reader of the stream sees the warning on the run's first event.
    const first = await client.sse(`/runs/${r.body.id}/events`, { stopAfter: 1 });
    expect(first.events[0].event).toBe('status');
    expect(first.events[0].data).toEqual({ status: 'queued', attempt: 0, warnings: [warning] });

    await h.startWorker({ agents: [defineAgent({ name: 'greeter', run: async (ctx) => `hi ${ctx.input.content}` })] });
    expect((await client.waitStatus(r.body.id, ['succeeded'])).result.answer).toBe('hi soon');
    // The whole stream: the warning once, on the first event; the later ones as before.
    const all = await client.sse(`/runs/${r.body.id}/events`);
    expect(all.ended).toBe(true);
    expect(all.events.filter((e) => JSON.stringify(e.data).includes('warnings'))).toHaveLength(1);
    await api.close();
  });

  it('re-runs go through the same check: refused without awaitAgent, queued with it', async () => {
    const api = await h.startApi();
    const client = await h.client(api.url, 'rerun', 'client');
    await h.startWorker({ agents: [hello] });
    const r = await client.submit('s-1', 'x', { agent: 'ghost', awaitAgent: true });
    expect(r.status).toBe(202);
    expect((await client.post(`/runs/${r.body.id}/cancel`)).status).toBe(200);
    await client.waitStatus(r.body.id, ['cancelled']);

    const refused = await client.post(`/runs/${r.body.id}/rerun`, {});
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('UNKNOWN_AGENT');
    expect((await client.get(`/runs?rerunOf=${r.body.id}`)).body.runs).toEqual([]);

    const queued = await client.post(`/runs/${r.body.id}/rerun`, { awaitAgent: true });
    expect(queued.status).toBe(202);
    expect(queued.body.rerunOf).toBe(r.body.id);
    expect(queued.body.warnings[0]).toContain('"ghost"');
    await client.post(`/runs/${queued.body.id}/cancel`);
    await api.close();
  });

  it('a retry of a submit whose idempotency key made a run answers that run, with or without awaitAgent', async () => {
    const api = await h.startApi();
    const client = await h.client(api.url, 'idem', 'client');
    await h.startWorker({ agents: [hello] });
    const first = await client.submit('s-1', 'x', { agent: 'ghost', awaitAgent: true, idempotencyKey: 'k-1' });
    expect(first.status).toBe(202);
    const again = await client.submit('s-1', 'x', { agent: 'ghost', idempotencyKey: 'k-1' });
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    await client.post(`/runs/${first.body.id}/cancel`);
    await api.close();
  });

  it('baton submit says the refusal and exits 1, and queues the run with --await-agent', async () => {
    const api = await h.startApi();
    await h.startWorker({ agents: [hello] });
    const env = { BATON_URL: api.url, BATON_API_KEY: await h.key('cli', 'client'), BATON_SCOPE: 'cli' };
    const base = ['submit', '--runtime', h.runtime, '--agent', 'helo', '--session', 's-1'];
    // One process at a time: each is a tsx start, slow on a loaded machine.
    const refused = await runBaton([...base, 'hi'], env);
    expect(refused.code, refused.stderr).toBe(1);
    expect(refused.stderr).toContain('422 UNKNOWN_AGENT');
    const queued = await runBaton([...base, '--await-agent', 'hi'], env);
    expect(queued.code, queued.stderr).toBe(0);
    const run = (await (await h.client(api.url, 'cli', 'client')).get(`/runs/${queued.stdout.trim()}`)).body;
    expect(run).toMatchObject({ agent: 'helo', status: 'queued' });
    await api.close();
  }, 120_000);

  it('queues with a warning when the operator sets UNKNOWN_AGENT_SUBMIT=queue', async () => {
    const api = await h.startApi({ UNKNOWN_AGENT_SUBMIT: 'queue' });
    const client = await h.client(api.url, 'operator', 'client');
    await h.startWorker({ agents: [hello] });
    const r = await client.submit('s-1', 'x', { agent: 'helo' });
    expect(r.status).toBe(202);
    expect(r.body.warnings).toEqual([expect.stringContaining('no worker of runtime')]);
    await client.post(`/runs/${r.body.id}/cancel`);
    await api.close();
  });

  it('queues an agent the runtime offered in the last day while no worker is live (a restart), with a warning', async () => {
    const rt = `${h.runtime}-restart`;
    const api = await h.startApi();
    const client = await h.client(api.url, 'restart', 'client');
    const w = await h.startWorker({ agents: [hello], env: { RUNTIME: rt } });
    await w.close();
    const r = await client.submit('s-1', 'back', { agent: 'hello', runtime: rt });
    expect(r.status).toBe(202);
    expect(r.body.warnings).toEqual([
      `no live worker serves runtime "${rt}"; the run stays queued until one with agent "hello" starts (it fails UNKNOWN_AGENT if none starts within 10 min)`,
    ]);
    // The typo is still refused: the runtime's agents of the day are known with no worker live.
    const typo = await client.submit('s-2', 'back', { agent: 'helo', runtime: rt });
    expect(typo.status).toBe(422);
    expect(typo.body.error.details[0].message).toBe(`runtime "${rt}" has no agent "helo"; it has "chat", "echo", "hello"`);

    await h.startWorker({ agents: [hello], env: { RUNTIME: rt } });
    expect((await client.waitStatus(r.body.id, ['succeeded'])).result.answer).toBe('hello, back');
    await api.close();
  });

  it('accepts any agent of a runtime no worker was seen in (the API started first), the warning on its stream', async () => {
    const rt = `${h.runtime}-fresh`;
    const api = await h.startApi();
    const client = await h.client(api.url, 'fresh', 'client');
    const r = await client.submit('s-1', 'first', { agent: 'hello', runtime: rt });
    expect(r.status).toBe(202);
    const warning = `no live worker serves runtime "${rt}"; the run stays queued until one with agent "hello" starts ` +
      '(it fails UNKNOWN_AGENT if none starts within 10 min)';
    expect(r.body.warnings).toEqual([warning]);
    const first = await client.sse(`/runs/${r.body.id}/events`, { stopAfter: 1 });
    expect(first.events[0].data).toEqual({ status: 'queued', attempt: 0, warnings: [warning] });
    // A scheduled run's first event carries them as well.
    const later = await client.submit('s-2', 'later', { agent: 'hello', runtime: rt, delayMs: 3_600_000 });
    const due = await client.sse(`/runs/${later.body.id}/events`, { stopAfter: 1 });
    expect(due.events[0].data).toMatchObject({ status: 'scheduled', warnings: [expect.stringContaining(`runtime "${rt}"`)] });

    await h.startWorker({ agents: [hello], env: { RUNTIME: rt } });
    expect((await client.waitStatus(r.body.id, ['succeeded'])).result.answer).toBe('hello, first');
    // Served now: the stream's first event carries what the submit answered, nothing when that
    // had no warning (a worker live by its heartbeat; one starved past LEASE_MS on a loaded
    // machine is not live, and both say so alike).
    const served = await client.submit('s-3', 'now', { agent: 'hello', runtime: rt });
    expect(served.status).toBe(202);
    const plain = await client.sse(`/runs/${served.body.id}/events`, { stopAfter: 1 });
    expect(plain.events[0].data.warnings).toEqual(served.body.warnings);
    await client.post(`/runs/${later.body.id}/cancel`);
    await api.close();
  });
});
