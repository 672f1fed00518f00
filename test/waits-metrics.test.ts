import { beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import type { WorkerHandle } from '../src/worker/worker.ts';
import { closeWaitFixtureRedis, waitAgents } from './fixtures/wait-agents.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { scrape, total, type Sample } from './helpers/prom-text.ts';
import { track } from './helpers/resources.ts';

/**
 * baton_runs_waiting (read at scrape time over every scope, by kind) and the wait-duration
 * histogram (counted by the process that ended the wait), on a real API and worker.
 */
let h: Harness;
let api: ApiHandle;
let worker: WorkerHandle;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  process.env.REDIS_URL = h.redisUrl;
  process.env.BATON_KEY_PREFIX = h.prefix;
  track(null, closeWaitFixtureRedis);
  api = await h.startApi();
  worker = await h.startWorker({ agents: waitAgents });
  acme = await h.client(api.url, 'acme', 'client');
});

const both = async (): Promise<Sample[][]> => [(await scrape(`${api.url}/metrics`)).samples, (await scrape(`${worker.opsUrl}/metrics`)).samples];
const waiting = (s: Sample[], kind: string) => total(s, 'baton_runs_waiting', { runtime: h.runtime, kind });
const durations = (all: Sample[][], match: Record<string, string>) =>
  all.reduce((n, s) => n + total(s, 'baton_wait_duration_seconds_count', { runtime: h.runtime, ...match }), 0);

describe('wait metrics', () => {
  it('count waiting runs by kind in every process, and each wait that ended once, by kind and outcome', async () => {
    const [, workerBefore] = await both();
    expect(['input', 'approval', 'sleep'].map((k) => waiting(workerBefore, k))).toEqual([0, 0, 0]);
    const before = await both();

    const ask = (await acme.submit('m-1', 'q', { agent: 'fx-ask' })).body;
    const ship = (await acme.submit('m-2', 'v1', { agent: 'fx-ship' })).body;
    const other = await h.client(api.url, 'globex', 'client');
    const ask2 = (await other.submit('m-3', 'q', { agent: 'fx-ask' })).body;
    for (const [c, r] of [[acme, ask], [acme, ship], [other, ask2]] as const) await c.waitStatus(r.id, ['waiting']);
    // Every scope counts; the API and the worker report the same numbers.
    for (const s of await both()) expect(['input', 'approval', 'sleep'].map((k) => waiting(s, k))).toEqual([2, 1, 0]);

    await acme.post(`/runs/${ask.id}/waits/wait:answer:1`, { value: 1 });
    await acme.post(`/runs/${ship.id}/waits/wait:ship:1`, { value: { approved: true } });
    await other.post(`/runs/${ask2.id}/waits/wait:answer:1`, { value: 2 });
    const nap = (await acme.submit('m-4', 'nap', { agent: 'fx-nap', metadata: { ms: 300 } })).body;
    for (const [c, r] of [[acme, ask], [acme, ship], [other, ask2], [acme, nap]] as const) await c.waitStatus(r.id, ['succeeded']);

    const after = await waitFor(async () => {
      const all = await both();
      return durations(all, { kind: 'sleep', outcome: 'slept' }) - durations(before, { kind: 'sleep', outcome: 'slept' }) === 1 ? all : undefined;
    }, 10_000, 'the sleep to be counted');
    for (const s of after) expect(['input', 'approval', 'sleep'].map((k) => waiting(s, k))).toEqual([0, 0, 0]);
    const delta = (match: Record<string, string>) => durations(after, match) - durations(before, match);
    expect(delta({ kind: 'input', outcome: 'resumed' })).toBe(2);
    expect(delta({ kind: 'approval', outcome: 'resumed' })).toBe(1);
    expect(delta({ kind: 'input', outcome: 'timed_out' })).toBe(0);
    // Resumes are counted by the API that took them.
    expect(total(after[0], 'baton_wait_duration_seconds_count', { runtime: h.runtime, outcome: 'resumed' })
      - total(before[0], 'baton_wait_duration_seconds_count', { runtime: h.runtime, outcome: 'resumed' })).toBe(3);
  });
});
