import { beforeAll, describe, expect, it } from 'vitest';
import { sleep, useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import { FIXTURE, fx, runEvents } from './helpers/engine.ts';

/**
 * Invariant 12, a run that kills its workers: the agent calls process.exit halfway through
 * its answer, in real worker processes. Each death is a lease that runs out, then a takeover
 * by the next worker; after MAX_RECOVERIES takeovers the next claim fails the run with
 * RECOVERY_LIMIT instead of handing it to yet another worker to kill.
 */
const MAX_RECOVERIES = 2;
/** Far more workers than the limit lets die: the loop below must end well before this. */
const MAX_WORKERS = MAX_RECOVERIES + 4;

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness({ MAX_RECOVERIES: String(MAX_RECOVERIES) });
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
});

const exited = (w: Child) =>
  new Promise<void>((resolve) => {
    if (w.process.exitCode !== null || w.process.signalCode !== null) return resolve();
    w.process.once('exit', () => resolve());
  });

describe('a run whose workers keep dying', () => {
  it('fails with RECOVERY_LIMIT after MAX_RECOVERIES takeovers, and is not handed to another worker', async () => {
    const sub = await acme.submit('poison', 'kill your worker', { agent: 'fx-exit' });
    expect(sub.status).toBe(202);
    const runId = sub.body.id as string;
    const terminal = async () => {
      const run = (await acme.get(`/runs/${runId}`)).body;
      return ['succeeded', 'failed', 'cancelled'].includes(run.status) ? run : undefined;
    };
    // One worker at a time: when it dies, the next takes the run over once the lease has run out.
    let died = 0;
    let survivor: Child | undefined;
    for (let i = 0; i < MAX_WORKERS && !survivor; i++) {
      const w = await h.spawn('worker', { agents: [FIXTURE] });
      let gone = false;
      void exited(w).then(() => { gone = true; });
      await waitFor(async () => gone || (await terminal()) !== undefined, 30_000, 'the worker to die or the run to end');
      if (gone) died++;
      else survivor = w;
    }
    const run = await waitFor(terminal, 30_000, 'the run to end');
    expect(run).toMatchObject({ status: 'failed', attempt: 1, recoveries: MAX_RECOVERIES, lastError: { code: 'RECOVERY_LIMIT' } });
    expect(run.lastError.message).toContain(`MAX_RECOVERIES is ${MAX_RECOVERIES}`);
    expect(died).toBe(MAX_RECOVERIES + 1);
    expect(survivor, 'the worker that claimed the run last is alive').toBeDefined();
    expect(await fx(h, runId, 'executions')).toBe(String(MAX_RECOVERIES + 1));
    const events = await runEvents(h, 'acme', runId);
    expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'failed', error: { code: 'RECOVERY_LIMIT' } } });

    // Not looping: with a live worker, a lease and two sweeps later nothing ran again.
    await sleep(Number(h.env.LEASE_MS) + 2 * Number(h.env.SWEEP_INTERVAL_MS));
    expect(survivor!.process.exitCode).toBeNull();
    expect((await acme.get(`/runs/${runId}`)).body).toMatchObject({ status: 'failed', recoveries: MAX_RECOVERIES });
    expect(await fx(h, runId, 'executions')).toBe(String(MAX_RECOVERIES + 1));
    // The session is free again.
    const next = await acme.submit('poison', 'and now something else', { agent: 'echo' });
    expect((await acme.waitStatus(next.body.id, ['succeeded', 'failed'])).status).toBe('succeeded');
  }, 180_000);
});
