import { beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/lib/logger.ts';
import { redisNowMs } from '../src/lib/redis/redis.ts';
import { ScheduleStore } from '../src/lib/schedules/schedule-store.ts';
import { Scheduler, tickKey } from '../src/lib/schedules/scheduler.ts';
import type { SubmitLimit } from '../src/lib/transitions/submit.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { doorOf } from './helpers/submit.ts';

/**
 * What a scheduler does with ticks nobody fired in time, and with a tick the scope refuses,
 * driven one poll at a time (no process polls here: SCHEDULE_POLL_MS is 0 for the harness's
 * API and no other process runs). The gap is made by moving a schedule's next tick back, as
 * if every process had been down since then.
 */
let h: Harness;
let schedules: ScheduleStore;

beforeAll(async () => {
  h = await useHarness({ SCHEDULE_POLL_MS: '0' });
  schedules = new ScheduleStore(h.redis, h.keys, h.config, h.gateways().schedules);
});

/** A scheduler that counts a tick missed once it is `graceMs` late (SCHEDULE_MISSED_AFTER_MS). */
function scheduler(o: { limit?: SubmitLimit; graceMs?: number } = {}): Scheduler {
  const transitions = h.gateways();
  const config = { SCHEDULE_POLL_MS: 0, SCHEDULE_MISSED_AFTER_MS: o.graceMs ?? 5_000 };
  return new Scheduler(h.redis, h.keys, config, transitions.schedules, doorOf(h, { transitions: transitions.api, limit: o.limit }), createLogger('silent'));
}

/**
 * Makes a schedule in `scope` whose next tick is `secondsAgo` seconds back: a per-second one,
 * or with 0 a per-minute one whose tick is this minute's (late, and alone: the next is a minute on).
 */
async function behind(scope: string, missed: 'skip' | 'catchUpOne', secondsAgo: number): Promise<{ id: string; from: number; now: number }> {
  const s = await schedules.create(scope, {
    cron: secondsAgo ? '* * * * * *' : '0 * * * * *', missed, run: { sessionPerTick: true, input: { content: 'tick' }, runtime: h.runtime },
  });
  const now = await redisNowMs(h.redis);
  const from = secondsAgo ? Math.floor(now / 1000) * 1000 - secondsAgo * 1000 : Math.floor(now / 60_000) * 60_000;
  const sk = h.keys.scope(scope);
  await h.redis.hset(sk.schedule(s.id), 'nextAt', from);
  await h.redis.zadd(sk.schedulesDue, from, s.id);
  return { id: s.id, from, now };
}

/** For the per-minute schedules of `behind(…, 0)`: their tick, under a minute late, is not missed. */
const ALONE = { graceMs: 120_000 };

/** A submit rate of one token, refilled too slowly to matter. */
const TIGHT: SubmitLimit = { rate: 0.001, burst: 1 };

/** Another submit spends the scope's token under `limit`. */
async function spendToken(scope: string, limit: SubmitLimit): Promise<void> {
  await doorOf(h, { limit }).submit({ scope, sessionId: 'other', input: { content: 'x' }, runtime: h.runtime, agent: 'echo' });
}

async function ticksOf(scope: string): Promise<number[]> {
  const sk = h.keys.scope(scope);
  const runs = await h.redis.zrange(sk.runs, 0, -1);
  const ticks = await Promise.all(runs.map(async (r) => Date.parse(JSON.parse((await h.redis.hget(sk.run(r), 'metadata'))!).scheduledFor)));
  return ticks.sort((a, b) => a - b);
}

describe('missed ticks', () => {
  it('catchUpOne makes one run, for the latest missed tick, then goes on from after now', async () => {
    const { id, from } = await behind('late-catch', 'catchUpOne', 30);
    const s = scheduler({ graceMs: 0 });
    await s.poll();
    const ticks = await ticksOf('late-catch');
    expect(ticks).toHaveLength(1);
    expect(ticks[0]).toBeGreaterThanOrEqual(from + 29_000);
    const rec = await h.redis.hgetall(h.keys.scope('late-catch').schedule(id));
    expect(Number(rec.nextAt)).toBeGreaterThan(ticks[0]!);
    expect(rec).toMatchObject({ fired: '1', lastTick: String(ticks[0]) });
    expect(rec.pending).toBeUndefined();
    // Another poll at once finds nothing more due from the gap.
    await s.poll();
    expect((await ticksOf('late-catch')).filter((t) => t <= ticks[0]!)).toHaveLength(1);
  });

  it('skip makes no run for the missed ticks, and the next is the first tick after now', async () => {
    const { id, now } = await behind('late-skip', 'skip', 30);
    await scheduler({ graceMs: 0 }).poll();
    // None of the missed ticks (a tick falling exactly on the poll's millisecond would be on time).
    expect((await ticksOf('late-skip')).filter((t) => t < now)).toEqual([]);
    const rec = await h.redis.hgetall(h.keys.scope('late-skip').schedule(id));
    expect(Number(rec.nextAt)).toBeGreaterThan(now);
    expect(rec.fired).toBe('0');
  });

  it('ticks found within SCHEDULE_MISSED_AFTER_MS of their time all fire, late, in a row', async () => {
    const { from } = await behind('busy', 'skip', 3);
    await scheduler({ graceMs: 5_000 }).poll();
    const ticks = await ticksOf('busy');
    expect(ticks.slice(0, 4)).toEqual([from, from + 1000, from + 2000, from + 3000]);
  });

  it('past SCHEDULE_MISSED_AFTER_MS, catchUpOne makes the latest missed tick and the ones after it', async () => {
    const { from } = await behind('outage', 'catchUpOne', 20);
    const before = await redisNowMs(h.redis);
    await scheduler({ graceMs: 5_000 }).poll();
    const ticks = await ticksOf('outage');
    // The first is a missed one (over 5 s late), and every tick after it follows a second apart.
    expect(ticks[0]).toBeGreaterThan(from + 10_000);
    expect(ticks[0]).toBeLessThan(before - 4_000);
    for (let i = 1; i < ticks.length; i++) expect(ticks[i]! - ticks[i - 1]!).toBe(1000);
    expect(ticks.at(-1)).toBeGreaterThan(before - 1_000);
  });

  it('a tick that is late but alone fires, whatever the policy', async () => {
    const { id, from } = await behind('late-alone', 'skip', 0);
    await scheduler(ALONE).poll();
    expect(await ticksOf('late-alone')).toEqual([from]);
    expect(await h.redis.hget(h.keys.scope('late-alone').schedule(id), 'lastTick')).toBe(String(from));
  });
});

describe('a tick', () => {
  it('left pending by a process that died is submitted again by another as the same run', async () => {
    const { id, from } = await behind('crashed', 'skip', 0);
    const sk = h.keys.scope('crashed');
    // The dead process claimed the tick and made its run, but never marked it done.
    await scheduler(ALONE).poll();
    const [runId] = await h.redis.zrange(sk.runs, 0, -1);
    await h.redis.hset(sk.schedule(id), 'pending', from, 'fired', 0);
    await h.redis.hdel(sk.schedule(id), 'lastRunId', 'lastTick');
    await h.redis.zadd(sk.schedulesDue, 0, id);
    await scheduler(ALONE).poll();
    expect(await h.redis.zrange(sk.runs, 0, -1)).toEqual([runId]);
    expect(await h.redis.hgetall(sk.schedule(id))).toMatchObject({ fired: '1', lastRunId: runId, lastTick: String(from) });
    expect(await h.redis.hget(sk.run(runId!), 'idempotencyKey')).toBe(tickKey(id, from));
  });

  it('held back by the scope’s submit rate stays pending, and fires once the rate lets it within SCHEDULE_MISSED_AFTER_MS', async () => {
    const { id, from } = await behind('held', 'skip', 0);
    const sk = h.keys.scope('held');
    // Another submit spends the scope's one token first.
    await spendToken('held', TIGHT);
    await scheduler({ ...ALONE, limit: TIGHT }).poll();
    expect(await h.redis.hgetall(sk.schedule(id))).toMatchObject({ pending: String(from), fired: '0' });
    expect(await h.redis.hget(sk.schedule(id), 'lastError')).toBeNull();
    // It is looked at again when the rate allows a submit (here: past the window, capped there),
    // not at the next poll.
    const retryAt = Number(await h.redis.zscore(sk.schedulesDue, id));
    expect(retryAt).toBeGreaterThan(await redisNowMs(h.redis));
    expect(retryAt).toBe(from + ALONE.graceMs + 1);
    // The scope's rate is raised, and that time comes: the next poll makes its run.
    await h.redis.zadd(sk.schedulesDue, 0, id);
    await scheduler({ ...ALONE, limit: { rate: 1_000, burst: 1_000 } }).poll();
    const rec = await h.redis.hgetall(sk.schedule(id));
    expect(rec).toMatchObject({ fired: '1', lastTick: String(from) });
    expect(rec.pending).toBeUndefined();
    expect(await h.redis.hget(sk.run(rec.lastRunId!), 'idempotencyKey')).toBe(tickKey(id, from));
    expect(await h.redis.zcard(sk.runs)).toBe(2);
  });

  it('refused by the submit rate past SCHEDULE_MISSED_AFTER_MS makes no run and says why; the next tick is taken up as usual', async () => {
    // Ticks 3 s back, missed after 1 s: catchUpOne fires the latest missed one, over a second late.
    const { id, from } = await behind('limited', 'catchUpOne', 3);
    const sk = h.keys.scope('limited');
    await spendToken('limited', TIGHT);
    await scheduler({ graceMs: 1_000, limit: TIGHT }).poll();
    const rec = await h.redis.hgetall(sk.schedule(id));
    const refused = JSON.parse(rec.lastError!);
    expect(refused).toMatchObject({ code: 'RATE_LIMITED' });
    expect(refused.tick).toBeGreaterThanOrEqual(from);
    expect(rec.fired).toBe('0');
    // The ticks after it are due within the window: the next is held back in its turn (pending), not refused.
    expect(Number(rec.pending)).toBeGreaterThan(refused.tick);
    expect(Number(rec.nextAt)).toBeGreaterThan(refused.tick);
    expect(await h.redis.zcard(sk.runs)).toBe(1);
  });

  it('comes in by the door every run takes: an agent its runtime never offered queues, with the registry\'s warning on its first status event', async () => {
    const { id, from } = await behind('unoffered', 'skip', 0);
    const sk = h.keys.scope('unoffered');
    // The runtime's workers offered `echo` an hour ago; the template's agent is a typo of it.
    await h.redis.hset(h.keys.runtimeAgents(h.runtime), 'echo', await redisNowMs(h.redis) - 3_600_000);
    await h.redis.hset(sk.schedule(id), 'run', JSON.stringify({ sessionPerTick: true, input: { content: 'tick' }, runtime: h.runtime, agent: 'ecko' }));
    await scheduler(ALONE).poll();
    const rec = await h.redis.hgetall(sk.schedule(id));
    expect(rec).toMatchObject({ fired: '1', lastTick: String(from) });
    expect(rec.lastError).toBeUndefined();
    // Made, waiting for a worker with the agent (dispatched is queued as the API shows it).
    expect(['queued', 'dispatched']).toContain(await h.redis.hget(sk.run(rec.lastRunId!), 'status'));
    const [[, first]] = await h.redis.xrange(sk.events(rec.lastRunId!), '-', '+', 'COUNT', 1);
    const status = JSON.parse(first![first!.indexOf('data') + 1]!);
    expect(status.warnings).toEqual([expect.stringContaining('no worker of runtime')]);
  });
});
