import { beforeAll, describe, expect, it } from 'vitest';
import { parseRunRecord } from '../src/lib/transitions/record.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import type { Submissions } from '../src/lib/engine/submissions.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { doorOf } from './helpers/submit.ts';

/**
 * A submit answers with the run's record, and the API shows it as the 202's body. A submit
 * that dispatches at once sends back the fields it wrote instead of reading the record again
 * (transitions/submit.lua); the other paths read it. Either way the answer must be what Redis holds.
 * No worker runs here, so nothing changes a record between the submit and the read.
 */
let h: Harness;
let door: Submissions;

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0', MAX_ACTIVE_PER_SCOPE: '2', SUBMIT_RATE_PER_SEC: '0' });
  door = doorOf(h);
});

const stored = async (scope: string, runId: string) => parseRunRecord(await h.redis.hgetall(h.keys.scope(scope).run(runId)));

describe('the record a submit answers with', () => {
  it('is the stored record: dispatched at once (with every optional field), queued behind the session, parked for a slot, scheduled, repeated', async () => {
    const base = { scope: 'acme', runtime: h.runtime, agent: 'echo' };
    const full = await door.submit({
      ...base, sessionId: 'a', input: { content: 'hi' }, metadata: { tag: 'x', n: 1 }, memory: { window: 4 },
      maxAttempts: 5, ttlMs: 60_000, timeoutMs: 30_000, idempotencyKey: 'idem-1',
    });
    expect(full.created).toBe(true);
    expect(full.run.status).toBe('dispatched');
    expect(full.run.startBy).toBeGreaterThan(full.run.createdAt);
    expect(full.run).toEqual(await stored('acme', full.run.id));

    const plain = await door.submit({ ...base, sessionId: 'b', input: { content: 'plain' } });
    expect(plain.run.status).toBe('dispatched');
    expect(plain.run).toEqual(await stored('acme', plain.run.id));

    // Behind the session's active run; then, with both slots taken, parked for one.
    const behind = await door.submit({ ...base, sessionId: 'a', input: { content: 'second' } });
    expect(behind.run.status).toBe('queued');
    expect(behind.run).toEqual(await stored('acme', behind.run.id));
    const parked = await door.submit({ ...base, sessionId: 'c', input: { content: 'no slot' } });
    expect(parked.run.status).toBe('queued');
    expect(parked.run).toEqual(await stored('acme', parked.run.id));

    const later = await door.submit({ ...base, sessionId: 'd', input: { content: 'later' }, delayMs: 60_000 });
    expect(later.run.status).toBe('scheduled');
    expect(later.run).toEqual(await stored('acme', later.run.id));

    const again = await door.submit({
      ...base, sessionId: 'a', input: { content: 'hi' }, metadata: { tag: 'x', n: 1 }, memory: { window: 4 },
      maxAttempts: 5, ttlMs: 60_000, timeoutMs: 30_000, idempotencyKey: 'idem-1',
    });
    expect(again.created).toBe(false);
    expect(again.run).toEqual(await stored('acme', full.run.id));
  });
});

/**
 * A claim answers with the run's record as its own writes left it, assembled from the one
 * read it starts with (transitions/claim.lua): a first start, a start that takes the agent's default
 * attempts, a retry's next attempt and a takeover of a lease that ran out must each answer
 * what Redis holds.
 */
describe('the record a claim answers with', () => {
  const base = { scope: 'claims', runtime: 'rt', agent: 'echo' };
  const claimed = async (reply: Awaited<ReturnType<ReturnType<Harness['gateways']>['worker']['claim']>>) => {
    if (reply.kind !== 'claimed') throw new Error(`expected a claim, got ${reply.kind}`);
    return reply;
  };

  it('is the stored record: first start (agent default attempts, ttl), retry, takeover', async () => {
    const t = h.gateways({ LEASE_MS: '300' });
    const first = await door.submit({ ...base, sessionId: 'c1', input: { content: 'one' }, ttlMs: 60_000 });
    const c1 = await claimed(await t.worker.claim({ scope: 'claims', runId: first.run.id }, 'w1', { echo: 7 }, { echo: 10 }));
    expect(c1.run.status).toBe('running');
    expect(c1.run.maxAttempts).toBe(7);
    expect(c1.run.attempt).toBe(1);
    expect(c1.run).toEqual(await stored('claims', first.run.id));

    // A retry's next attempt: retryAt goes, the attempt counts on.
    await t.worker.of(new Attempt(c1.run, c1.fence, h.keys.scope('claims'))).retry({ delayMs: 0, lastError: '{"code":"X","message":"x"}' });
    const c2 = await claimed(await t.worker.claim({ scope: 'claims', runId: first.run.id }, 'w1', { echo: 7 }, { echo: 10 }));
    expect(c2.run.attempt).toBe(2);
    expect(c2.run.retryAt).toBeUndefined();
    expect(c2.run).toEqual(await stored('claims', first.run.id));

    // Its lease runs out (300 ms, no heartbeat): another worker takes it over.
    await new Promise((r) => setTimeout(r, 450));
    const c3 = await claimed(await t.worker.claim({ scope: 'claims', runId: first.run.id }, 'w2', {}, { echo: 10 }));
    expect(c3.recovered).toBe(true);
    expect(c3.run.leaseOwner).toBe('w2');
    expect(c3.run.recoveries).toBe(1);
    expect(c3.run).toEqual(await stored('claims', first.run.id));
  });
});

/**
 * A submit refused by the scope's rate limit changes nothing: the session it named stays
 * free, so the next run of that session starts at once instead of queueing behind a run that
 * was never made (the submit takes the session's head before it looks at the limit).
 */
describe('a rate-limited submit', () => {
  it('leaves its session free', async () => {
    const limited = doorOf(h, { limit: { rate: 1, burst: 1 } });
    const r = { scope: 'limited', runtime: 'rt', agent: 'echo', input: { content: 'x' } };
    await limited.submit({ ...r, sessionId: 'first' });
    await expect(limited.submit({ ...r, sessionId: 'free' })).rejects.toMatchObject({ code: 'RATE_LIMITED' });
    expect(await h.redis.hget(h.keys.scope('limited').session('free'), 'active')).toBeNull();
    await new Promise((res) => setTimeout(res, 1100));
    const next = await limited.submit({ ...r, sessionId: 'free' });
    expect(next.run.status).toBe('dispatched');
  });
});
