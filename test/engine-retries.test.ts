import { beforeAll, describe, expect, it } from 'vitest';
import { flaky, flakyTwice } from './fixtures/engine-agents.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { fx, runEvents, statuses, useFixturesInProcess } from './helpers/engine.ts';
import { sleep } from './helpers/harness.ts';

/** Invariant 6: retries are classified, backed off, persisted and visible while they wait. */
let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  useFixturesInProcess(h);
  const api = await h.startApi();
  await h.startWorker({ agents: [flaky, flakyTwice] });
  acme = await h.client(api.url, 'acme');
});

/** Polls GET until the run ends, keeping every distinct `retrying` view a client could see. */
async function watchRetries(runId: string): Promise<{ final: any; waits: any[] }> {
  const waits: any[] = [];
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    const run = (await acme.get(`/runs/${runId}`)).body;
    if (run.status === 'retrying' && waits.at(-1)?.retryAt !== run.retryAt) waits.push(run);
    if (['succeeded', 'failed', 'cancelled'].includes(run.status)) return { final: run, waits };
    await sleep(25);
  }
  throw new Error(`run ${runId} did not end; saw ${JSON.stringify(waits)}`);
}

describe('retries', () => {
  it('retries transient failures, honours Retry-After, and shows each wait', async () => {
    const sub = await acme.submit('retry-1', 'try hard', {
      agent: 'fx-flaky', metadata: { plan: ['retry-after:1500', 'http:503:2', 'ok'] },
    });
    const runId = sub.body.id as string;
    const { final, waits } = await watchRetries(runId);

    expect(final).toMatchObject({ status: 'succeeded', attempt: 3, maxAttempts: 3, result: { answer: 'ok on attempt 3 after 3 executions' } });
    expect(final.retryAt).toBeUndefined();
    expect(await fx(h, runId, 'executions')).toBe('3');
    // Memoized work ran once across the three attempts; the repeated tool name got its own key.
    expect([await fx(h, runId, 'prepare'), await fx(h, runId, 'lookup')]).toEqual(['1', '2']);
    const steps = await h.redis.hgetall(h.keys.scope('acme').steps(runId));
    const stored = Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, JSON.parse(v)]));
    expect(Object.fromEntries(Object.entries(stored).map(([k, { v, e }]) => [k, e === undefined ? { v } : { v, e }]))).toEqual({
      'step:prepare:1': { v: 1 }, 'tool:lookup:1': { v: 1 }, 'tool:lookup:2': { v: 2 },
      'infer:draft:1': { v: 'drafted', e: 'draft ' },
    });
    // Each result carries when its body ran, recorded by the attempt that ran it.
    for (const s of Object.values(stored)) expect(s.finishedAt).toBeGreaterThanOrEqual(s.startedAt);
    expect(final.result.toolCallsSeen).toBe(2);

    // Both waits were visible through GET, with the absolute time of the next attempt.
    expect(waits.map((w) => [w.attempt, w.lastError.code])).toEqual([[1, 'RETRY_AFTER'], [2, 'HTTP_503']]);
    // updatedAt and retryAt are stamped by the same script: their gap is the delay chosen,
    // which is the provider's Retry-After (1500 ms, then "2" seconds) rather than the backoff.
    expect(waits.map((w) => Date.parse(w.retryAt) - Date.parse(w.updatedAt))).toEqual([1500, 2000]);
    expect(waits[0].lastError.message).toBe('slow down (execution 1)');

    const events = await runEvents(h, 'acme', runId);
    expect(statuses(events)).toEqual(['queued', 'running', 'retrying', 'running', 'retrying', 'running']);
    const retrying = events.filter((e) => e.type === 'status' && e.data.status === 'retrying');
    expect(retrying.map((e) => e.data)).toEqual(waits.map((w) => ({
      status: 'retrying', attempt: w.attempt, maxAttempts: 3, retryAt: Date.parse(w.retryAt), lastError: w.lastError,
    })));
    // No attempt started before its retryAt.
    const running = events.filter((e) => e.type === 'status' && e.data.status === 'running').slice(1);
    running.forEach((e, i) => expect(e.at).toBeGreaterThanOrEqual(retrying[i].data.retryAt));
    expect(events.filter((e) => e.type === 'attempt').map((e) => e.data.attempt)).toEqual([1, 2, 3]);
    // Every attempt streams the inference's text again (replayed from the memo after the first).
    const lastAttempt = events.map((e) => e.type).lastIndexOf('attempt');
    const tokensAfter = events.slice(lastAttempt).filter((e) => e.type === 'token').map((e) => e.data.text).join('');
    expect(tokensAfter).toBe('draft ');
  });

  it('fails a permanent error after one attempt', async () => {
    for (const [plan, code] of [['permanent', 'BAD_INPUT'], ['bug', 'TypeError'], ['http:400', 'HTTP_400']]) {
      const sub = await acme.submit(`perm-${code}`, 'no', { agent: 'fx-flaky', metadata: { plan: [plan] } });
      const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
      expect(run).toMatchObject({ status: 'failed', attempt: 1, lastError: { code } });
      expect(await fx(h, sub.body.id, 'executions')).toBe('1');
      const events = await runEvents(h, 'acme', sub.body.id);
      expect(statuses(events)).toEqual(['queued', 'running']);
      expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'failed', error: { code } } });
    }
  });

  it('fails with lastError once attempts are exhausted (submit override and agent default)', async () => {
    const overridden = await acme.submit('exhaust-1', 'again', { agent: 'fx-flaky', maxAttempts: 2, metadata: { plan: ['transient'] } });
    const byAgent = await acme.submit('exhaust-2', 'again', { agent: 'fx-flaky-2', metadata: { plan: ['transient'] } });
    const agentButOverridden = await acme.submit('exhaust-3', 'again', { agent: 'fx-flaky-2', maxAttempts: 3, metadata: { plan: ['transient'] } });
    const expectations: [string, number][] = [[overridden.body.id, 2], [byAgent.body.id, 2], [agentButOverridden.body.id, 3]];
    for (const [runId, attempts] of expectations) {
      const run = await acme.waitStatus(runId, ['succeeded', 'failed']);
      expect(run).toMatchObject({
        status: 'failed', attempt: attempts, maxAttempts: attempts,
        lastError: { code: 'TRANSIENT', message: `upstream blip on execution ${attempts}` },
      });
      expect(run.retryAt).toBeUndefined();
      expect(await fx(h, runId, 'executions')).toBe(String(attempts));
      const events = await runEvents(h, 'acme', runId);
      expect(events.filter((e) => e.type === 'status' && e.data.status === 'retrying')).toHaveLength(attempts - 1);
      expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'failed', error: { code: 'TRANSIENT' } } });
    }
  });
});
