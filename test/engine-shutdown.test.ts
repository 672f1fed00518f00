import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { FIXTURE, fx, fxSet, runEvents, statuses } from './helpers/engine.ts';

/**
 * Graceful shutdown with real processes. Leases are 30 s here, so a hand-over that waited
 * for the lease to expire could not finish within the test's waits: the run moving to the
 * other worker at all shows the lease was handed over, not timed out.
 */
let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness({ LEASE_MS: '30000', SHUTDOWN_GRACE_MS: '3000' });
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme');
});

describe('graceful shutdown', () => {
  it('SIGTERM stops claiming, lets short runs finish, and hands the rest over at once', async () => {
    const a = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A', LOG_LEVEL: 'info' } });
    const short = (await acme.submit('sd-short', 'short', { agent: 'fx-hold' })).body.id as string;
    const long = (await acme.submit('sd-long', 'long', { agent: 'fx-hold', metadata: { say: 'A was here' } })).body.id as string;
    for (const id of [short, long]) expect(await waitFor(() => fx(h, id, 'reached'), 20_000, `A to start ${id}`)).toBe('A');
    const b = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'B' } });

    const exited = new Promise<number | null>((r) => a.process.once('exit', (code) => r(code)));
    const termAt = Date.now();
    a.process.kill('SIGTERM');
    await waitFor(() => a.output().includes('worker stopping: no new claims'), 10_000, 'A to stop claiming');
    const late = (await acme.submit('sd-late', 'late', { agent: 'fx-hold', metadata: { workMs: 10 } })).body.id as string;

    // A run that completes inside the grace period finishes on A, without a takeover.
    await fxSet(h, short, 'go');
    const s = await acme.waitStatus(short, ['succeeded', 'failed'], 10_000);
    expect(s).toMatchObject({ status: 'succeeded', recoveries: 0 });
    expect(await fx(h, short, 'finished-by')).toBe('A');

    // The long one was stopped at the deadline and taken over by B straight away.
    const recovered = await waitFor(
      async () => (await runEvents(h, 'acme', long)).find((e) => e.type === 'status' && e.data.status === 'recovered'),
      15_000, 'B to take the long run over',
    );
    console.log(
      `[engine-shutdown] SIGTERM -> taken over by another worker after ${recovered.at - termAt} ms ` +
      '(SHUTDOWN_GRACE_MS 3000, LEASE_MS 30000)',
    );
    const aborted = await waitFor(() => fx(h, long, 'aborted'), 5_000, 'A to record its abort');
    expect(JSON.parse(aborted)).toMatchObject({ why: 'shutdown', by: 'A' });
    expect(await exited).toBe(0);
    await waitFor(async () => (await fx(h, long, 'reached')) === 'B', 10_000, 'B to run the agent');
    await fxSet(h, long, 'go');
    const l = await acme.waitStatus(long, ['succeeded', 'failed'], 10_000);
    expect(l).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 1, result: { answer: 'held by B' } });
    expect(statuses(await runEvents(h, 'acme', long))).toEqual(['queued', 'running', 'recovered']);

    // Submitted after SIGTERM: only B could take it.
    await acme.waitStatus(late, ['succeeded'], 10_000);
    expect(await fx(h, late, 'finished-by')).toBe('B');
    await b.close();
  });
});
