import { beforeAll, describe, expect, it } from 'vitest';
import { BatonApiError, BatonClient } from '../src/client.ts';
import { CLI_TEST_TIMEOUT_MS, runBaton } from './helpers/cli.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/**
 * Cron schedules through the API (src/lib/schedules; docs/schedules.md): validation, the
 * next five fire times, pause, resume, delete, the scope's cap, and per-second ticks made
 * into runs with their tick in the metadata. test/schedules-faults.test.ts kills processes
 * and Redis under a schedule.
 */
let h: Harness;
let url: string;

beforeAll(async () => {
  h = await useHarness({ SCHEDULES_MAX_PER_SCOPE: '3', SCHEDULE_POLL_MS: '100' });
  url = (await h.startApi()).url;
  await h.startWorker();
});

describe('schedules', () => {
  it('refuse bad expressions, time zones and templates with VALIDATION_FAILED naming the field', async () => {
    const admin = await h.client(url, 'vals', 'admin');
    const run = { sessionId: 's1', input: { content: 'hi' }, runtime: h.runtime };
    const cases: [Record<string, unknown>, string][] = [
      [{ cron: '61 * * * *', run }, 'body.cron'],
      [{ cron: '* * * *', run }, 'body.cron'],
      [{ cron: '* * * * * * *', run }, 'body.cron'],
      [{ cron: '0 0 30 2 *', run }, 'body.cron'],
      [{ cron: '* * * * *', timezone: 'Mars/Olympus', run }, 'body.timezone'],
      [{ cron: '* * * * *', run: { input: { content: 'hi' } } }, 'body.run.sessionId'],
      [{ cron: '* * * * *', run: { ...run, sessionPerTick: true } }, 'body.run.sessionId'],
      [{ cron: '* * * * *', run: { ...run, metadata: { scheduledFor: 'x' } } }, 'body.run.metadata'],
    ];
    for (const [body, path] of cases) {
      const res = await admin.post('/schedules', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_FAILED');
      expect(res.body.error.details.map((d: { path: string }) => d.path), JSON.stringify(res.body)).toContain(path);
    }
    const client = await h.client(url, 'vals', 'client');
    expect((await client.post('/schedules', { cron: '* * * * *', run })).body.error.code).toBe('FORBIDDEN');
  });

  it('show the next five fire times in the time zone, pause, resume and delete', async () => {
    const admin = await h.client(url, 'crud', 'admin');
    const made = await admin.post('/schedules', {
      cron: '30 9 * * 1-5', timezone: 'America/New_York', missed: 'catchUpOne',
      run: { sessionPerTick: true, input: { content: 'the morning report' }, runtime: h.runtime, metadata: { team: 'ops' } },
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const s = made.body;
    expect(s).toMatchObject({ status: 'active', missed: 'catchUpOne', timezone: 'America/New_York', fired: 0 });
    expect(s.nextFireTimes).toHaveLength(5);
    for (const t of s.nextFireTimes as string[]) {
      const d = new Date(t);
      // 09:30 in New York is 13:30 or 14:30 UTC depending on daylight saving; weekdays only.
      expect([13, 14]).toContain(d.getUTCHours());
      expect(d.getUTCMinutes()).toBe(30);
      const day = new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', weekday: 'short' }).format(d);
      expect(['Mon', 'Tue', 'Wed', 'Thu', 'Fri']).toContain(day);
    }
    const client = await h.client(url, 'crud', 'client');
    expect((await client.get(`/schedules/${s.id}`)).body).toEqual(s);
    expect((await client.get('/schedules')).body.schedules.map((x: { id: string }) => x.id)).toEqual([s.id]);

    const paused = await admin.post(`/schedules/${s.id}/pause`, {});
    expect(paused.body).toMatchObject({ status: 'paused', nextFireTimes: [] });
    const resumed = await admin.post(`/schedules/${s.id}/resume`, {});
    expect(resumed.body).toMatchObject({ status: 'active' });
    expect(resumed.body.nextFireTimes).toEqual(s.nextFireTimes);

    expect((await admin.del(`/schedules/${s.id}`)).status).toBe(204);
    const gone = await client.get(`/schedules/${s.id}`);
    expect(gone).toMatchObject({ status: 404, body: { error: { code: 'SCHEDULE_NOT_FOUND' } } });
    expect((await admin.post(`/schedules/${s.id}/pause`, {})).status).toBe(404);
    expect((await admin.del(`/schedules/${s.id}`)).status).toBe(404);
  });

  it('are capped per scope by SCHEDULES_MAX_PER_SCOPE', async () => {
    const admin = await h.client(url, 'capped', 'admin');
    const body = { cron: '0 0 1 1 *', run: { sessionId: 's', input: { content: 'x' }, runtime: h.runtime } };
    for (let i = 0; i < 3; i++) expect((await admin.post('/schedules', body)).status).toBe(201);
    const over = await admin.post('/schedules', body);
    expect(over).toMatchObject({ status: 429, body: { error: { code: 'TOO_MANY_SCHEDULES' } } });
  });

  it('make one run per tick, a session each, with the tick in the metadata, until paused', async () => {
    const admin = await h.client(url, 'ticks', 'admin');
    const made = await admin.post('/schedules', {
      cron: '* * * * * *', run: { sessionPerTick: true, input: { content: 'tick' }, runtime: h.runtime, metadata: { kind: 'probe' } },
    });
    expect(made.status).toBe(201);
    const id = made.body.id as string;
    const seen = await waitFor(async () => {
      const s = (await admin.get(`/schedules/${id}`)).body;
      return s.fired >= 3 ? s : undefined;
    }, 20_000, 'three ticks');
    await admin.post(`/schedules/${id}/pause`, {});
    // Wait for a claimed tick to settle, then read every run the schedule made.
    const settled = await waitFor(async () => {
      const pending = await h.redis.hexists(h.keys.scope('ticks').schedule(id), 'pending');
      return pending ? undefined : (await admin.get(`/schedules/${id}`)).body;
    }, 10_000, 'no pending tick');
    const runIds = await h.redis.zrange(h.keys.scope('ticks').runs, 0, -1);
    const runs = await Promise.all(runIds.map(async (r) => (await admin.get(`/runs/${r}`)).body));
    expect(runs).toHaveLength(settled.fired);
    expect(settled.fired).toBeGreaterThanOrEqual(seen.fired);
    const ticks = runs.map((r) => r.metadata.scheduledFor as string).sort();
    expect(new Set(ticks).size).toBe(ticks.length);
    for (const r of runs) {
      expect(r.metadata).toMatchObject({ kind: 'probe', scheduleId: id });
      expect(r.sessionId).toBe(`${id}-${Date.parse(r.metadata.scheduledFor)}`);
    }
    // Consecutive seconds: no tick was skipped while a process was up.
    const ms = ticks.map((t) => Date.parse(t));
    for (let i = 1; i < ms.length; i++) expect(ms[i]! - ms[i - 1]!).toBe(1000);
    expect(settled.lastRunId).toBe(runs.find((r) => r.metadata.scheduledFor === settled.lastTick)?.id);
    for (const r of runs) expect((await admin.waitStatus(r.id, ['succeeded'])).status).toBe('succeeded');
  });
});

const runCli = runBaton;

describe('schedules from the client and the CLI', () => {
  it('the client makes, reads, pauses, resumes and deletes one, and a client key may read but not make', async () => {
    const baton = new BatonClient({ url, apiKey: await h.key('typed', 'admin'), scope: 'typed' });
    const s = await baton.createSchedule({
      cron: '0 0 12 * * *', timezone: 'Asia/Kathmandu', run: { sessionId: 'daily', input: { content: 'noon' }, runtime: h.runtime },
    });
    expect(s.nextFireTimes).toHaveLength(5);
    // Noon in Kathmandu (UTC+5:45) is 06:15 UTC.
    for (const t of s.nextFireTimes) expect(t).toMatch(/T06:15:00\.000Z$/);
    expect((await baton.listSchedules()).schedules.map((x) => x.id)).toEqual([s.id]);
    expect(await baton.listSchedules({ limit: 1, cursor: `${Date.parse(s.createdAt)}_${s.id}` })).toEqual({ schedules: [], nextCursor: null });
    expect((await baton.pauseSchedule(s.id)).status).toBe('paused');
    expect((await baton.resumeSchedule(s.id)).status).toBe('active');
    const reader = new BatonClient({ url, apiKey: await h.key('typed', 'client'), scope: 'typed' });
    expect((await reader.getSchedule(s.id)).id).toBe(s.id);
    await expect(reader.deleteSchedule(s.id)).rejects.toMatchObject({ status: 403, code: 'FORBIDDEN' });
    await baton.deleteSchedule(s.id);
    const err = await baton.getSchedule(s.id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BatonApiError);
    expect(err).toMatchObject({ status: 404, code: 'SCHEDULE_NOT_FOUND' });
  });

  it('baton schedules create, list, get, pause, resume and delete', async () => {
    const env = { BATON_URL: url, BATON_API_KEY: await h.key('cli', 'admin'), BATON_SCOPE: 'cli' };
    // Hourly, half an hour from now: it cannot fire while the test runs (its `fired 0` holds).
    // (A `*/15` schedule fired between create and list when a run crossed a quarter hour.)
    const cron = `${(new Date().getUTCMinutes() + 30) % 60} * * * *`;
    const made = await runCli(['schedules', 'create', '--cron', cron, '--timezone', 'Europe/Paris', '--missed', 'catchUpOne',
      '--session-per-tick', '--runtime', h.runtime, '--metadata', '{"team":"ops"}', '--json', 'the', 'report'], env);
    expect(made.code, made.stderr).toBe(0);
    const s = JSON.parse(made.stdout);
    expect(s).toMatchObject({ cron, missed: 'catchUpOne', run: { sessionPerTick: true, input: { content: 'the report' }, metadata: { team: 'ops' } } });
    const listed = await runCli(['schedules', 'list'], env);
    expect(listed.stdout).toContain(`${s.id}  active  "${cron}" Europe/Paris  missed catchUpOne  fired 0`);
    // A page at a time: the next page's cursor on stderr, then that page.
    const admin = await h.client(url, 'cli', 'admin');
    const second = (await admin.post('/schedules', { cron: '0 0 1 1 *', run: { sessionId: 's', input: { content: 'x' }, runtime: h.runtime } })).body;
    const first = await runCli(['schedules', 'list', '--limit', '1'], env);
    expect(first.stdout.trim().split('\n')).toHaveLength(1);
    expect(first.stdout).toContain(s.id);
    const cursor = /more: --cursor (\S+)/.exec(first.stderr)?.[1];
    expect(cursor, first.stderr).toBeDefined();
    const rest = await runCli(['schedules', 'list', '--limit', '1', '--cursor', cursor!, '--json'], env);
    expect(JSON.parse(rest.stdout)).toEqual({ schedules: [second], nextCursor: null });
    expect((await runCli(['schedules', 'list', '--limit', '0'], env)).code).toBe(2);
    expect((await admin.del(`/schedules/${second.id}`)).status).toBe(204);
    const got = await runCli(['schedules', 'get', s.id], env);
    expect(got.stdout.split('\n').filter((l) => l.startsWith('  next ')).length).toBe(5);
    expect((await runCli(['schedules', 'pause', s.id], env)).stdout).toContain(`${s.id}  paused`);
    expect((await runCli(['schedules', 'resume', s.id], env)).stdout).toContain(`${s.id}  active`);
    expect((await runCli(['schedules', 'delete', s.id], env)).stdout).toContain(`${s.id}: deleted`);
    const gone = await runCli(['schedules', 'get', s.id], env);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('404 SCHEDULE_NOT_FOUND');
    const wrong = await runCli(['schedules', 'create', '--cron', '* * * * *', 'x'], env);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('give --session <id> or --session-per-tick');
  }, CLI_TEST_TIMEOUT_MS);
});
