import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { FIXTURE, fx, fxSet, runEvents, statuses } from './helpers/engine.ts';

/**
 * Recovery with the default settings, not the harness's fast ones: LEASE_MS, HEARTBEAT_MS,
 * SWEEP_INTERVAL_MS and DISPATCH_GRACE_MS are blanked, which loadConfig reads as unset, in
 * this file's API and in every worker it spawns. The two halves of one trade-off: a dead
 * worker's runs must be taken over soon, and a live worker that stalls for a while must
 * keep its runs (a takeover would make it redo unmemoized work). Times are printed, never
 * asserted; `npm run bench` prints the same kill → recovered figure next to its goal.
 */
const DEFAULT_RECOVERY = { LEASE_MS: '', HEARTBEAT_MS: '', SWEEP_INTERVAL_MS: '', DISPATCH_GRACE_MS: '' };

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness(DEFAULT_RECOVERY);
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme');
});

/** Waits until the run is running and returns the pid in its lease owner's worker id (`<runtime>-<pid>-<hex>`). */
async function holderPid(runId: string): Promise<number> {
  const owner = await waitFor(async () => {
    const [status, leaseOwner] = await h.redis.hmget(h.keys.scope('acme').run(runId), 'status', 'leaseOwner');
    return status === 'running' ? leaseOwner : undefined;
  }, 20_000, `run ${runId} to start`);
  return Number(owner.slice(h.runtime.length + 1).split('-')[0]);
}

describe('recovery with the default settings', () => {
  it('a worker whose event loop stalls for 3 s keeps its runs', async () => {
    const a = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A' } });
    const staller = (await acme.submit('stall-1', 'stall', { agent: 'fx-stall', metadata: { stallMs: 3000 } })).body.id as string;
    const bystander = (await acme.submit('stall-2', 'wait', { agent: 'fx-hold' })).body.id as string;
    expect([await holderPid(staller), await holderPid(bystander)]).toEqual([a.process.pid, a.process.pid]);
    // Another worker is up: a takeover would be possible, so none happening is the point.
    const b = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'B' } });

    await fxSet(h, staller, 'go');
    const stalledMs = Number(await waitFor(() => fx(h, staller, 'stalled-ms'), 20_000, 'the stall to end'));
    // The bystander was held through the whole stall; only now may it finish.
    await fxSet(h, bystander, 'go');
    const [s, w] = await Promise.all([
      acme.waitStatus(staller, ['succeeded', 'failed']), acme.waitStatus(bystander, ['succeeded', 'failed']),
    ]);
    console.log(`[recovery-defaults] worker A's event loop was blocked ${stalledMs} ms (LEASE_MS ${h.config.LEASE_MS}, HEARTBEAT_MS ${h.config.HEARTBEAT_MS})`);
    expect(stalledMs).toBeGreaterThanOrEqual(3000);
    expect(s).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 0, result: { answer: 'stalled by A' } });
    expect(w).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 0, result: { answer: 'held by A' } });
    for (const runId of [staller, bystander]) expect(statuses(await runEvents(h, 'acme', runId))).toEqual(['queued', 'running']);
    await Promise.all([a.close(), b.close()]);
  });

  it('a SIGKILLed worker\'s runs are resumed by another worker', async () => {
    const a = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A' } });
    const runId = (await acme.submit('kill-1', 'survive', { agent: 'fx-hold' })).body.id as string;
    expect(await holderPid(runId)).toBe(a.process.pid);
    const b = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'B' } });

    const killedAt = Date.now();
    await a.kill('SIGKILL');
    await fxSet(h, runId, 'go');
    const recovered = await waitFor(
      async () => (await runEvents(h, 'acme', runId)).find((e) => e.type === 'status' && e.data.status === 'recovered'),
      60_000, 'the recovered status event',
    );
    console.log(
      `[recovery-defaults] SIGKILL -> recovered after ${recovered.at - killedAt} ms ` +
      `(LEASE_MS ${h.config.LEASE_MS}, HEARTBEAT_MS ${h.config.HEARTBEAT_MS}, SWEEP_INTERVAL_MS ${h.config.SWEEP_INTERVAL_MS})`,
    );
    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 20_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 1, result: { answer: 'held by B' } });
    expect(statuses(await runEvents(h, 'acme', runId))).toEqual(['queued', 'running', 'recovered']);
    await b.close();
  }, 120_000);
});
