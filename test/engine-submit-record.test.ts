import { beforeAll, describe, expect, it } from 'vitest';
import { parseRunRecord } from '../src/lib/engine/record.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { useHarness, type Harness } from './helpers/harness.ts';

/**
 * A submit answers with the run's record, and the API shows it as the 202's body. A submit
 * that dispatches at once sends back the fields it wrote instead of reading the record again
 * (lua/submit.lua); the other paths read it. Either way the answer must be what Redis holds.
 * No worker runs here, so nothing changes a record between the submit and the read.
 */
let h: Harness;
let store: RunStore;

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0', MAX_ACTIVE_PER_SCOPE: '2', SUBMIT_RATE_PER_SEC: '0' });
  store = new RunStore(h.redis, h.keys, h.config, h.transitions());
});

const stored = async (scope: string, runId: string) => parseRunRecord(await h.redis.hgetall(h.keys.scope(scope).run(runId)));

describe('the record a submit answers with', () => {
  it('is the stored record: dispatched at once (with every optional field), queued behind the session, parked for a slot, scheduled, repeated', async () => {
    const base = { scope: 'acme', runtime: h.runtime, agent: 'echo' };
    const full = await store.submit({
      ...base, sessionId: 'a', input: { content: 'hi' }, metadata: { tag: 'x', n: 1 }, memory: { window: 4 },
      maxAttempts: 5, ttlMs: 60_000, timeoutMs: 30_000, idempotencyKey: 'idem-1',
    });
    expect(full.created).toBe(true);
    expect(full.run.status).toBe('dispatched');
    expect(full.run.startBy).toBeGreaterThan(full.run.createdAt);
    expect(full.run).toEqual(await stored('acme', full.run.id));

    const plain = await store.submit({ ...base, sessionId: 'b', input: { content: 'plain' } });
    expect(plain.run.status).toBe('dispatched');
    expect(plain.run).toEqual(await stored('acme', plain.run.id));

    // Behind the session's active run; then, with both slots taken, parked for one.
    const behind = await store.submit({ ...base, sessionId: 'a', input: { content: 'second' } });
    expect(behind.run.status).toBe('queued');
    expect(behind.run).toEqual(await stored('acme', behind.run.id));
    const parked = await store.submit({ ...base, sessionId: 'c', input: { content: 'no slot' } });
    expect(parked.run.status).toBe('queued');
    expect(parked.run).toEqual(await stored('acme', parked.run.id));

    const later = await store.submit({ ...base, sessionId: 'd', input: { content: 'later' }, delayMs: 60_000 });
    expect(later.run.status).toBe('scheduled');
    expect(later.run).toEqual(await stored('acme', later.run.id));

    const again = await store.submit({
      ...base, sessionId: 'a', input: { content: 'hi' }, metadata: { tag: 'x', n: 1 }, memory: { window: 4 },
      maxAttempts: 5, ttlMs: 60_000, timeoutMs: 30_000, idempotencyKey: 'idem-1',
    });
    expect(again.created).toBe(false);
    expect(again.run).toEqual(await stored('acme', full.run.id));
  });
});
