import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startRestartableRedis, type RestartableRedis } from '../bench/restartable-redis.ts';
import { sleep, useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * A schedule firing every second under three API and three worker processes (each its own
 * scheduler), one of each SIGKILLed and then Redis restarted: every tick is one run, none
 * twice, and the Redis outage is one gap of missed ticks closed by one `catchUpOne` run. The
 * issue asks for a minute; this runs about half of one (6 + 6 ticks, ~5 s down, 10 ticks) to
 * keep the suite short, and SCHEDULES_FAULT_MINUTE=1 runs the whole minute (20 + 15, 5 s, 20).
 * This file brings its own redis-server (AOF, appendfsync always), because it kills it.
 */
let rr: RestartableRedis;
let h: Harness;
const SCOPE = 'timetable';
const MINUTE = process.env.SCHEDULES_FAULT_MINUTE === '1';
/** Ticks with every process up, after the SIGKILLs, and after Redis came back. */
const [UP, KILLED, BACK] = MINUTE ? [20, 15, 20] : [6, 6, 10];

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'baton-schedules-'));
  rr = await startRestartableRedis(dir);
  track(rr, async () => { await rr.stop(); rmSync(dir, { recursive: true, force: true }); });
  // Ticks over 2 s late count as missed, so the 5 s outage below misses some (the default is 5 s).
  h = await useHarness({ REDIS_URL: rr.url, SCHEDULE_POLL_MS: '200', SCHEDULE_MISSED_AFTER_MS: '2000' });
});

afterAll(async () => {
  if (!rr.running) await rr.start();
});

/** The schedule's `fired` count, or undefined while Redis is away. */
async function fired(id: string): Promise<number | undefined> {
  const n = await h.redis.hget(h.keys.scope(SCOPE).schedule(id), 'fired').catch(() => null);
  return n === null ? undefined : Number(n);
}

const moreTicks = (id: string, n: number, from: number, what: string) =>
  waitFor(async () => ((await fired(id)) ?? 0) >= from + n || undefined, 60_000, what);

it('makes one run per tick with 3 APIs and 3 workers, one of each SIGKILLed, and Redis restarted', async () => {
  const apis = await Promise.all([0, 1, 2].map(() => h.spawn('api')));
  const workers = await Promise.all([0, 1, 2].map(() => h.spawn('worker')));
  const auth = { authorization: `Bearer ${await h.key(SCOPE, 'admin')}` };
  const made = await call(apis[0]!.url!, 'POST', `/v1/scopes/${SCOPE}/schedules`, {
    cron: '* * * * * *', missed: 'catchUpOne',
    run: { sessionPerTick: true, input: { content: 'tick' }, runtime: h.runtime },
  }, auth);
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  const id = made.body.id as string;

  await moreTicks(id, UP, 0, 'ticks with every process up');
  await apis[1]!.kill('SIGKILL');
  await workers[1]!.kill('SIGKILL');
  await moreTicks(id, KILLED, (await fired(id))!, 'ticks after the SIGKILLs');

  const before = (await fired(id))!;
  const downAt = Date.now();
  await rr.kill();
  await sleep(5_000); // the outage's length, not an assertion
  await rr.start();
  const upAt = Date.now();
  await waitFor(() => fired(id), 30_000, 'redis back');
  await moreTicks(id, BACK, before, 'ticks after the restart');

  const paused = await call(apis[2]!.url!, 'POST', `/v1/scopes/${SCOPE}/schedules/${id}/pause`, {}, auth);
  expect(paused.status).toBe(200);
  await waitFor(async () => (await h.redis.hexists(h.keys.scope(SCOPE).schedule(id), 'pending')) === 0 || undefined, 10_000, 'no tick pending');

  const sk = h.keys.scope(SCOPE);
  const runIds = await h.redis.zrange(sk.runs, 0, -1);
  const ticks = await Promise.all(runIds.map(async (r) => Date.parse(JSON.parse((await h.redis.hget(sk.run(r), 'metadata'))!).scheduledFor)));
  ticks.sort((a, b) => a - b);

  // None twice.
  expect(new Set(ticks).size, 'a tick made two runs').toBe(ticks.length);
  // The schedule's count agrees with the runs.
  expect(Number(await h.redis.hget(sk.schedule(id), 'fired'))).toBe(ticks.length);
  // Every second from the first tick to the last is a run, but for one gap: the ticks missed
  // while Redis was down (over SCHEDULE_MISSED_AFTER_MS late when it came back), closed by the
  // catchUpOne run of the latest of them; the ticks after it, late but not missed, fire each.
  const gaps: { from: number; to: number }[] = [];
  for (let i = 1; i < ticks.length; i++) {
    if (ticks[i]! - ticks[i - 1]! !== 1000) gaps.push({ from: ticks[i - 1]! + 1000, to: ticks[i]! - 1000 });
  }
  console.log(`${ticks.length} ticks, ${ticks.length} runs; Redis down ${new Date(downAt).toISOString()} → ${new Date(upAt).toISOString()}; `
    + `gaps ${JSON.stringify(gaps.map((g) => [new Date(g.from).toISOString(), (g.to - g.from) / 1000 + 1]))}`);
  expect(gaps, 'one gap, the Redis outage').toHaveLength(1);
  const gap = gaps[0]!;
  // It starts where the ticks fired before Redis was killed end (the count read just before the
  // kill, or one more that fired in between), and the scheduler fires every second after it:
  // the BACK ticks asked for after the restart, but for one that may be before the gap.
  const beforeGap = ticks.filter((t) => t < gap.from).length;
  expect([before, before + 1]).toContain(beforeGap);
  expect(ticks.filter((t) => t > gap.to).length).toBeGreaterThanOrEqual(BACK - 1);
  // The run after the gap is the catch-up, made for the latest missed tick once Redis was back.
  const catchUp = ticks.find((t) => t > gap.to);
  expect(catchUp).toBe(gap.to + 1000);

  // Every run was made through the normal submit and ends succeeded on the surviving workers.
  for (const r of runIds) {
    await waitFor(async () => (await h.redis.hget(sk.run(r), 'status')) === 'succeeded' || undefined, 60_000, `run ${r} succeeded`);
  }
}, 240_000);
