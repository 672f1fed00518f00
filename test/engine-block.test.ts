import { beforeAll, describe, expect, it } from 'vitest';
import { charge } from './fixtures/engine-agents.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { FIXTURE, fx, fxSet, runEvents, statuses, useFixturesInProcess } from './helpers/engine.ts';

/**
 * Invariant 5, the non-idempotent half: a tool that started but never recorded a result
 * (its worker was SIGKILLed in between) must not run again by itself. The run is blocked
 * until an operator resolves the step with a value or allows a re-run.
 */
let h: Harness;
let acme: ScopeClient;
let apiUrl: string;

beforeAll(async () => {
  h = await useHarness();
  useFixturesInProcess(h);
  const api = await h.startApi();
  apiUrl = api.url;
  acme = await h.client(api.url, 'acme');
});

describe('non-idempotent steps', () => {
  it('a crash between start and result blocks the run; both resolve modes continue it', async () => {
    const a = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A' } });
    const byValue = (await acme.submit('block-1', 'charge me', { agent: 'fx-charge' })).body.id as string;
    const byRerun = (await acme.submit('block-2', 'charge me too', { agent: 'fx-charge' })).body.id as string;
    for (const id of [byValue, byRerun]) await waitFor(() => fx(h, id, 'reached'), 20_000, `worker A inside the tool of ${id}`);
    await h.startWorker({ agents: [charge] });
    await a.kill('SIGKILL');
    for (const id of [byValue, byRerun]) await fxSet(h, id, 'go');

    for (const id of [byValue, byRerun]) {
      const run = await acme.waitStatus(id, ['blocked', 'succeeded', 'failed'], 20_000);
      expect(run).toMatchObject({
        status: 'blocked', attempt: 1, recoveries: 1,
        blocked: { stepKey: 'tool:charge:1', reason: expect.stringContaining('non-idempotent') },
      });
      expect(Date.parse(run.blocked.since)).toBeGreaterThan(0);
      expect(await fx(h, id, 'charge')).toBe('1');
      expect(await fx(h, id, 'charge-key')).toBe(`${id}:tool:charge:1`);
      const events = await runEvents(h, 'acme', id);
      expect(statuses(events)).toEqual(['queued', 'running', 'recovered', 'blocked']);
      expect(events.at(-1)!.data.blocked).toMatchObject({ stepKey: 'tool:charge:1' });
    }

    // A later turn of the blocked session waits behind it.
    const next = (await acme.submit('block-1', 'after the charge', { agent: 'echo' })).body.id as string;
    expect((await acme.get(`/runs/${next}`)).body.status).toBe('queued');

    // Refusals first: wrong step, a run that is not blocked, a role that may not resolve.
    expect((await acme.post(`/runs/${byValue}/steps/tool:other:1/resolve`, { rerun: true })).body.error.code).toBe('STEP_NOT_BLOCKED');
    expect((await acme.post(`/runs/${next}/steps/tool:charge:1/resolve`, { rerun: true })).body.error.code).toBe('STEP_NOT_BLOCKED');
    const client = await h.client(apiUrl, 'acme', 'client');
    expect((await client.post(`/runs/${byValue}/steps/tool:charge:1/resolve`, { rerun: true })).status).toBe(403);

    // value: the operator's result stands in for the tool; the tool does not run again.
    const resolved = await acme.post(`/runs/${byValue}/steps/tool:charge:1/resolve`, { value: { receipt: 'manual', amount: 5 } });
    expect(resolved.status).toBe(200);
    expect(resolved.body.blocked).toBeUndefined();
    const valueRun = await acme.waitStatus(byValue, ['succeeded', 'failed']);
    expect(valueRun).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'charged {"receipt":"manual","amount":5}', toolCallsSeen: 1 } });
    expect(await fx(h, byValue, 'charge')).toBe('1');
    expect((await acme.waitStatus(next, ['succeeded'])).result.answer).toBe('after the charge');

    // rerun: the operator allows the tool to run once more.
    expect((await acme.post(`/runs/${byRerun}/steps/tool:charge:1/resolve`, { rerun: true })).status).toBe(200);
    const rerunRun = await acme.waitStatus(byRerun, ['succeeded', 'failed']);
    expect(rerunRun).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'charged {"receipt":"r2","amount":5}' } });
    expect(await fx(h, byRerun, 'charge')).toBe('2');

    for (const [id, mode] of [[byValue, 'value'], [byRerun, 'rerun']]) {
      const events = await runEvents(h, 'acme', id);
      expect(statuses(events)).toEqual(['queued', 'running', 'recovered', 'blocked', 'queued', 'running']);
      expect(events.find((e) => e.data.resolved)?.data.resolved).toEqual({ stepKey: 'tool:charge:1', mode });
      expect(events.filter((e) => e.type === 'attempt').map((e) => e.data.attempt)).toEqual([1, 1, 1]);
    }
    const msgs = (await acme.get('/sessions/block-1/messages')).body.messages;
    expect(msgs.map((m: any) => m.content)).toEqual([
      'charge me', 'charged {"receipt":"manual","amount":5}', 'after the charge', 'after the charge',
    ]);
  });
});
