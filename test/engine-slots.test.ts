import { beforeAll, describe, expect, it } from 'vitest';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { shareAt, waterLevel } from '../src/lib/engine/flow/fair-share.ts';
import { Sweeper } from '../src/lib/engine/sweeper.ts';
import type { RunRecord } from '../src/lib/transitions/record.ts';
import { gateways, type Gateways } from '../src/lib/transitions/gateways.ts';
import { createLogger } from '../src/lib/logger.ts';
import { sleep, useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';
import { doorOf } from './helpers/submit.ts';

/**
 * A scope's slots and what waits for them (transitions/lib/admission.lua): a run's end
 * gives the slots free by the limit of the process ending it to parked session heads; runs
 * parked by concurrency key take turns, best priority first within a key, each key held to
 * its cap; a scope's `limits` hash (an operator's) and the fair share's level apply at the
 * next call. No worker runs here; the test claims and finishes runs itself.
 */
let h: Harness;
const scope = 'slots';

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0', MAX_ACTIVE_PER_SCOPE: '1', PRIORITY_STEP_MS: '1000' });
});

const status = (runId: string, s = scope) => h.redis.hget(h.keys.scope(s).run(runId), 'status');

async function runToEnd(t: Gateways, runId: string, s = scope): Promise<void> {
  const c = await t.worker.claim({ scope: s, runId }, 'w', {}, {});
  if (c.kind !== 'claimed') throw new Error(`claim of ${runId}: ${c.kind}`);
  await t.worker.of(new Attempt(c.run, c.fence, h.keys.scope(s))).finish({ status: 'succeeded', result: '{"answer":"ok","finishReason":"stop","toolCallsSeen":0}' });
}

function storeOf(t: Gateways) {
  const door = doorOf(h, { transitions: t.api });
  return async (s: string, sessionId: string, extra: { priority?: number; concurrencyKey?: string } = {}) =>
    (await door.submit({ scope: s, runtime: h.runtime, agent: 'echo', sessionId, input: { content: sessionId }, ...extra })).run;
}

/** The runs of scope `s` holding a slot, in the order they got it (their dispatch events). */
async function dispatchedOf(s: string, ids: readonly string[]): Promise<string[]> {
  const st = await Promise.all(ids.map((id) => status(id, s)));
  return ids.filter((_, i) => st[i] === 'dispatched');
}

/** Runs `fn` 3 ms after now, so what it submits is due in a later millisecond than what came before. */
async function spaced<T>(fn: () => Promise<T>): Promise<T> {
  await sleep(3);
  return fn();
}

describe('scope slots', () => {
  it('a run\'s end hands the slots free by its process\'s limit on at once; an earlier version\'s parked list is admitted by the sweeper', async () => {
    const one = h.gateways();
    const submit = storeOf(one);
    // A few ms apart: runs due in one millisecond have no order among them (docs/flow-control.md).
    const a = await submit(scope, 'a');
    const [b, c, d] = [await spaced(() => submit(scope, 'b')), await spaced(() => submit(scope, 'c')), await spaced(() => submit(scope, 'd'))];
    expect([a.status, b.status, c.status, d.status]).toEqual(['dispatched', 'queued', 'queued', 'queued']);
    expect(await h.redis.hget(h.keys.scope(scope).meta, 'parked')).toBe('3');

    await runToEnd(one, a.id);
    expect([await status(b.id), await status(c.id), await status(d.id)]).toEqual(['dispatched', 'queued', 'queued']);

    // A process with a limit of 3 ends b: both slots its limit leaves free are handed on.
    const three = h.gateways({ MAX_ACTIVE_PER_SCOPE: '3' });
    await runToEnd(three, b.id);
    expect([await status(c.id), await status(d.id)]).toEqual(['dispatched', 'dispatched']);
    expect(await h.redis.exists(h.keys.scope(scope).ready)).toBe(0);
    expect(await h.redis.hget(h.keys.scope(scope).meta, 'parked')).toBe('0');
    expect(await h.redis.hget(h.keys.scope(scope).meta, 'active')).toBe('2');
    await runToEnd(three, c.id);
    await runToEnd(three, d.id);

    // A session head an earlier version parked in its list is admitted by the sweeper's fill.
    const e = await submit(scope, 'e');
    const f = await submit(scope, 'f');
    expect(f.status).toBe('queued');
    const sk = h.keys.scope(scope);
    await h.redis.zrem(`${sk.base}ready:q:`, f.id);
    await h.redis.del(sk.ready);
    await h.redis.hset(sk.meta, 'parked', 0);
    await h.redis.rpush(sk.legacyReady, f.id);
    await runToEnd(one, e.id);
    expect(await status(f.id)).toBe('queued');
    const dispatcher = new Dispatcher(h.redis, h.keys);
    track(dispatcher, () => dispatcher.close());
    await new Sweeper(h.redis, h.keys, h.config, dispatcher, one.sweeper, createLogger('silent')).sweep();
    expect(await status(f.id)).toBe('dispatched');
    expect(await h.redis.exists(sk.legacyReady)).toBe(0);
    await runToEnd(one, f.id);
  });

  it('priority: higher first, then oldest; a run is passed only by runs due less than (9 - priority) steps after it', async () => {
    const s = 'prio';
    const t = h.gateways();
    const made = storeOf(t);
    // "Oldest" is by submit time in ms: runs made in one millisecond have no order among them.
    const submit: typeof made = async (...a) => {
      const run = await made(...a);
      await new Promise((r) => setTimeout(r, 3));
      return run;
    };
    const first = await submit(s, 'p-first');
    const low: RunRecord[] = [];
    for (let i = 0; i < 3; i++) low.push(await submit(s, `p-low-${i}`, { priority: 0 }));
    const high = [await submit(s, 'p-high-0', { priority: 9 }), await submit(s, 'p-high-1', { priority: 9 })];
    const mid = await submit(s, 'p-mid', { priority: 5 });
    const order: string[] = [];
    let holder = first.id;
    for (let i = 0; i < 6; i++) {
      await runToEnd(t, holder, s);
      const [next] = await dispatchedOf(s, [...low, ...high, mid].map((r) => r.id));
      order.push(next);
      holder = next;
    }
    await runToEnd(t, holder, s);
    expect(order).toEqual([high[0].id, high[1].id, mid.id, low[0].id, low[1].id, low[2].id]);

    // Ageing: a priority-0 run waits 9 steps (9 s here) at most for later priority-9 runs.
    const blocker = await submit(s, 'age-block');
    const old = await submit(s, 'age-old', { priority: 0 });
    const sk = h.keys.scope(s);
    // As if it had become due 10 s ago (its score is its due time less priority steps).
    await h.redis.zadd(`${sk.base}ready:q:`, Date.now() - 10_000, old.id);
    const fresh = await submit(s, 'age-fresh', { priority: 9 });
    await runToEnd(t, blocker.id, s);
    expect(await dispatchedOf(s, [old.id, fresh.id])).toEqual([old.id]);
    await runToEnd(t, old.id, s);
    await runToEnd(t, fresh.id, s);
  });

  it('concurrency keys take turns for the slots; one with 48 parked delays another\'s first run by one turn at most', async () => {
    const s = 'keys';
    const t = h.gateways({ MAX_ACTIVE_PER_SCOPE: '2' });
    const submit = storeOf(t);
    const bulk: RunRecord[] = [];
    for (let i = 0; i < 50; i++) bulk.push(await submit(s, `k-bulk-${i}`, { concurrencyKey: 'bulk' }));
    const other: RunRecord[] = [];
    for (let i = 0; i < 3; i++) other.push(await submit(s, `k-other-${i}`, { concurrencyKey: 'other' }));
    // The first two took the slots; the rest are parked by key.
    expect(await dispatchedOf(s, bulk.map((r) => r.id))).toEqual([bulk[0].id, bulk[1].id]);
    const started: string[] = [];
    const running = [bulk[0].id, bulk[1].id];
    const all = [...bulk, ...other].map((r) => r.id);
    for (let i = 0; i < 6; i++) {
      await runToEnd(t, running.shift()!, s);
      const now = await dispatchedOf(s, all);
      const fresh = now.filter((id) => !running.includes(id));
      expect(fresh).toHaveLength(1);
      started.push(fresh[0]);
      running.push(fresh[0]);
    }
    const key = (id: string) => (other.some((r) => r.id === id) ? 'other' : 'bulk');
    // The keys take turns in the order they joined: the other key's first run waits for one
    // run of the key ahead of it in line, however many that key has parked.
    expect(started.map(key)).toEqual(['bulk', 'other', 'bulk', 'other', 'bulk', 'other']);
    for (const id of running) await runToEnd(t, id, s);
    await h.redis.del(h.keys.scope(s).ready);
  });

  it('maxActivePerKey from the scope\'s limits: never two of one key at once; a key at its cap waits, then rejoins the turns', async () => {
    const s = 'percap';
    const sk = h.keys.scope(s);
    await h.redis.hset(sk.limits, 'maxActive', 4, 'maxActivePerKey', 1);
    const t = h.gateways();
    const submit = storeOf(t);
    const a: RunRecord[] = [];
    const b: RunRecord[] = [];
    for (let i = 0; i < 4; i++) {
      a.push(await submit(s, `cap-a-${i}`, { concurrencyKey: 'a' }));
      b.push(await submit(s, `cap-b-${i}`, { concurrencyKey: 'b' }));
    }
    const ids = [...a, ...b].map((r) => r.id);
    const keyOf = (id: string) => (a.some((r) => r.id === id) ? 'a' : 'b');
    let running = await dispatchedOf(s, ids);
    expect(running.map(keyOf).sort()).toEqual(['a', 'b']);
    expect(await h.redis.smembers(`${sk.base}ready:capped`)).toEqual(expect.arrayContaining(['a', 'b']));
    const done = new Set<string>();
    while (done.size < ids.length) {
      const aRun = running.find((id) => keyOf(id) === 'a') ?? running[0];
      await runToEnd(t, aRun, s);
      done.add(aRun);
      running = await dispatchedOf(s, ids);
      expect(running.filter((id) => keyOf(id) === 'a').length).toBeLessThanOrEqual(1);
      expect(running.filter((id) => keyOf(id) === 'b').length).toBeLessThanOrEqual(1);
      if (done.size < ids.length) expect(running.length).toBeGreaterThan(0);
    }
    expect(await h.redis.hget(sk.meta, 'parked')).toBe('0');
    expect(await h.redis.hget(sk.meta, 'key:a')).toBeNull();
  });

  it('a cancelled parked run leaves its key\'s queue at once, and the scope\'s maxActive applies at the next call', async () => {
    const s = 'limits';
    const sk = h.keys.scope(s);
    const t = h.gateways();
    const submit = storeOf(t);
    const runs: RunRecord[] = [];
    for (let i = 0; i < 4; i++) runs.push(await submit(s, `lim-${i}`));
    expect(await h.redis.hget(sk.meta, 'parked')).toBe('3');
    expect((await t.api.scope(s).cancel(runs[3].id)).outcome).toBe('cancelled');
    expect(await h.redis.hget(sk.meta, 'parked')).toBe('2');
    expect(await h.redis.zscore(`${sk.base}ready:q:`, runs[3].id)).toBeNull();
    // An operator raises maxActive: the next fill (the limits route calls it) starts them.
    await h.redis.hset(sk.limits, 'maxActive', 3);
    expect(await t.sweeper.fill(s)).toBe(true);
    expect(await dispatchedOf(s, runs.map((r) => r.id))).toHaveLength(3);
    // Lowered under the running count: running runs finish, none starts until under it.
    await h.redis.hset(sk.limits, 'maxActive', 1);
    const more = [await submit(s, 'lim-more-0'), await spaced(() => submit(s, 'lim-more-1'))];
    expect(more.map((r) => r.status)).toEqual(['queued', 'queued']);
    await runToEnd(t, runs[0].id, s);
    await runToEnd(t, runs[1].id, s);
    expect(await dispatchedOf(s, more.map((r) => r.id))).toEqual([]);
    await runToEnd(t, runs[2].id, s);
    expect(await dispatchedOf(s, more.map((r) => r.id))).toEqual([more[0].id]);
    await runToEnd(t, more[0].id, s);
    await runToEnd(t, more[1].id, s);
  });

  it('under contention a scope starts runs up to its share of the workers\' slots, ceil(level × weight)', async () => {
    const s = 'shared';
    const sk = h.keys.scope(s);
    await h.redis.hset(sk.limits, 'maxActive', 100, 'weight', 3);
    // The fair share's level (a process works it out: src/lib/engine/flow/fair-share.ts): 1.5 slots per unit of weight.
    const t = gateways(h.redis, h.keys, h.config, (() => {
      const d = new Dispatcher(h.redis, h.keys);
      track(d, () => d.close());
      return d;
    })(), () => fair);
    let fair: { level?: number; capacity?: number } = { level: 1.5, capacity: 20 };
    const submit = storeOf(t);
    const runs: RunRecord[] = [];
    for (let i = 0; i < 8; i++) runs.push(await submit(s, `share-${i}`));
    // ceil(1.5 × 3) = 5.
    expect(await dispatchedOf(s, runs.map((r) => r.id))).toHaveLength(5);
    // No contention, 6 live workers' slots: never more than those, whatever maxActive says.
    fair = { capacity: 6 };
    expect(await t.sweeper.fill(s)).toBe(true);
    expect(await dispatchedOf(s, runs.map((r) => r.id))).toHaveLength(6);
    for (const id of await dispatchedOf(s, runs.map((r) => r.id))) await runToEnd(t, id, s);
  });
});

describe('the fair share\'s water level', () => {
  it('is max-min fair by weight: a scope wanting less keeps what it wants, the rest is shared', () => {
    const s = (runnable: number, weight = 1, maxActive = 100) => ({ runnable, weight, maxActive });
    expect(waterLevel(16, [s(5), s(6)])).toBeUndefined();
    expect(waterLevel(16, [s(50), s(50)])).toBe(8);
    expect(waterLevel(16, [s(120, 3), s(120, 1)])).toBe(4);
    expect([3, 1].map((w) => shareAt(4, w))).toEqual([12, 4]);
    // The small scope wants 2; the 14 slots left go to the two others, 7 each.
    expect(waterLevel(16, [s(2), s(50), s(50)])).toBe(7);
    // maxActive caps what a scope wants.
    expect(waterLevel(16, [s(50, 1, 4), s(50), s(50)])).toBe(6);
    // Fractions round up (no worker idles for rounding): 3 scopes on 8 slots get 3 each.
    expect(shareAt(waterLevel(8, [s(9), s(9), s(9)])!, 1)).toBe(3);
    expect(waterLevel(0, [s(50), s(50)])).toBeUndefined();
  });
});
