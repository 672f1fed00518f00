import { beforeAll, describe, expect, it } from 'vitest';
import { maxOverlap } from './helpers/overlap.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Fair share between scopes: at most MAX_ACTIVE_PER_SCOPE (8 by default) runs of one scope
 * hold a slot at once, so a scope that floods a runtime cannot take every worker.
 */
let h: Harness;
let floodA: ScopeClient;
let politeB: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  expect(h.config.MAX_ACTIVE_PER_SCOPE).toBe(8);
  expect(h.config.WORKER_CONCURRENCY).toBeGreaterThan(8);
  // The per-scope submit rate limit would answer part of the flood 429; this test is about slots.
  const api = await h.startApi({ SUBMIT_RATE_PER_SEC: '0' });
  await h.startWorker();
  floodA = await h.client(api.url, 'flood-a', 'client');
  politeB = await h.client(api.url, 'polite-b', 'client');
});

async function submitAll(c: ScopeClient, n: number, prefix: string, extra: Record<string, unknown>): Promise<string[]> {
  const ids: string[] = [];
  // 20 submits in flight at a time: a quick flood without queueing thousands of sockets.
  for (let i = 0; i < n; i += 20) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(20, n - i) }, (_, j) => c.submit(`${prefix}-${i + j}`, 'one two three', extra)),
    );
    for (const b of batch) {
      expect(b.status).toBe(202);
      ids.push(b.body.id);
    }
  }
  return ids;
}

describe('fair share between scopes', () => {
  it("scope A floods 200 runs, scope B submits 5 after: B's runs start before A's backlog drains", async () => {
    const t0 = Date.now();
    // Each A run streams 3 tokens 40 ms apart: 200 runs through 8 slots take several seconds.
    const aIds = await submitAll(floodA, 200, 'a', { metadata: { delayMs: 40 } });
    const tB = Date.now();
    const bIds = await submitAll(politeB, 5, 'b', {});

    const bRuns = await Promise.all(bIds.map((id) => politeB.waitStatus(id, ['succeeded'], 30_000)));
    // One listing per poll instead of 200 pollers: the machine is shared.
    const aRuns: any[] = await waitFor(async () => {
      const runs = (await floodA.get('/runs?status=succeeded&limit=200')).body.runs;
      return runs.length === 200 ? runs : undefined;
    }, 50_000, "A's 200 runs to succeed");
    expect(new Set(aRuns.map((r) => r.id))).toEqual(new Set(aIds));
    const lastBStart = Math.max(...bRuns.map((r) => Date.parse(r.startedAt)));
    const aStartedAfterB = aRuns.filter((r) => Date.parse(r.startedAt) > lastBStart).length;
    const lastAStart = Math.max(...aRuns.map((r) => Date.parse(r.startedAt)));
    console.log(
      `fairness: 200 A submitted in ${tB - t0} ms; B started ${lastBStart - tB} ms after its submit; ` +
      `${aStartedAfterB} of 200 A runs started after the last B run; A drained ${lastAStart - tB} ms after B's submit; ` +
      `max concurrent A runs ${maxOverlap(aRuns)}, B runs ${maxOverlap(bRuns)}`,
    );
    expect(lastBStart).toBeLessThan(lastAStart);
    expect(aStartedAfterB).toBeGreaterThan(0);
    // Slots: never more than 8 runs of A between start and finish at once.
    expect(maxOverlap(aRuns)).toBeLessThanOrEqual(8);
    // No slot is leaked: all of them are free again.
    expect(Number(await h.redis.hget(h.keys.scope('flood-a').meta, 'active'))).toBe(0);
    expect(await h.redis.exists(h.keys.scope('flood-a').ready)).toBe(0);
    expect(await h.redis.hget(h.keys.scope('flood-a').meta, 'parked')).toBe('0');
  });
});
