import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { FIXTURE, fx, runEvents, statuses } from './helpers/engine.ts';

/**
 * Cancellation: a waiting run ends at once; a running run is stopped through Redis in the
 * worker process that holds it (a real child process here) and ends cancelled.
 */
let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme');
  await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'W' } });
});

describe('cancel', () => {
  it('stops a running run in the worker that holds it; the partial answer is kept as incomplete', async () => {
    const runId = (await acme.submit('c-run', 'hold on', { agent: 'fx-hold', metadata: { say: 'partial answer' } })).body.id as string;
    await waitFor(() => fx(h, runId, 'reached'), 20_000, 'the run to start');
    const asked = Date.now();
    const res = await acme.post(`/runs/${runId}/cancel`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: runId, status: 'running', cancelRequested: true });

    const aborted = JSON.parse(await waitFor(() => fx(h, runId, 'aborted'), 10_000, 'the agent signal to abort'));
    expect(aborted).toMatchObject({ why: 'cancelled', by: 'W' });
    console.log(`[engine-cancel] cancel request -> ctx.signal aborted in the worker process after ${aborted.at - asked} ms`);

    const run = await acme.waitStatus(runId, ['cancelled', 'succeeded', 'failed']);
    expect(run).toMatchObject({ status: 'cancelled', result: { answer: 'partial answer', finishReason: 'cancelled' } });
    const events = await runEvents(h, 'acme', runId);
    expect(statuses(events)).toEqual(['queued', 'running']);
    expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'cancelled' } });
    const msgs = (await acme.get('/sessions/c-run/messages')).body.messages;
    expect(msgs.map((m: any) => [m.role, m.content, m.incomplete])).toEqual([
      ['user', 'hold on', undefined], ['assistant', 'partial answer', true],
    ]);
  });

  it('cancels a queued run at once, and the session moves on', async () => {
    const first = (await acme.submit('c-queue', 'first', { agent: 'fx-hold' })).body.id as string;
    const second = (await acme.submit('c-queue', 'second', { agent: 'fx-hold' })).body.id as string;
    const third = (await acme.submit('c-queue', 'third', { agent: 'echo' })).body.id as string;
    await waitFor(() => fx(h, first, 'reached'), 20_000, 'the first run to start');
    expect((await acme.get(`/runs/${second}`)).body.status).toBe('queued');

    const res = await acme.post(`/runs/${second}/cancel`);
    expect(res.body).toMatchObject({ status: 'cancelled', result: { finishReason: 'cancelled' } });
    expect(statuses(await runEvents(h, 'acme', second))).toEqual(['queued']);
    expect(await fx(h, second, 'reached')).toBeNull();

    await acme.post(`/runs/${first}/cancel`);
    // The session's next turn is the third run: the cancelled one never starts.
    expect((await acme.waitStatus(third, ['succeeded'])).result.answer).toBe('third');
    expect(await fx(h, second, 'reached')).toBeNull();
  });

  it('cancels a run waiting for its retry at once', async () => {
    const runId = (await acme.submit('c-retry', 'wait', { agent: 'fx-flaky', metadata: { plan: ['retry-after:30000', 'ok'] } })).body.id as string;
    await acme.waitStatus(runId, ['retrying']);
    const res = await acme.post(`/runs/${runId}/cancel`);
    expect(res.body).toMatchObject({ status: 'cancelled', attempt: 1, lastError: { code: 'RETRY_AFTER' } });
    expect(res.body.retryAt).toBeUndefined();
    expect(statuses(await runEvents(h, 'acme', runId))).toEqual(['queued', 'running', 'retrying']);
    expect(await fx(h, runId, 'executions')).toBe('1');
  });

  it('cancels a run handed to a runtime with no worker, and a finished run is a no-op', async () => {
    const idle = (await acme.submit('c-idle', 'nobody serves me', { runtime: `none-${h.prefix}` })).body.id as string;
    expect((await acme.get(`/runs/${idle}`)).body.status).toBe('queued');
    expect((await acme.post(`/runs/${idle}/cancel`)).body.status).toBe('cancelled');

    const done = (await acme.submit('c-done', 'quick', { agent: 'echo' })).body.id as string;
    const before = await acme.waitStatus(done, ['succeeded']);
    const res = await acme.post(`/runs/${done}/cancel`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual(before);
    expect((await acme.post('/runs/nope/cancel')).status).toBe(404);
  });
});
