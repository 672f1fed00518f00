import { beforeAll, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startCluster, type LocalCluster } from './helpers/cluster.ts';
import { PARTITIONS_TTL_MS, jobId, partitionOf } from '../src/lib/engine/dispatcher.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { scrape, total } from './helpers/prom-text.ts';
import { commandStats } from '../bench/redis-stats.ts';
import { track } from './helpers/resources.ts';

/** The core flows against a real 3-master Redis Cluster that this file starts and stops. */
let h: Harness;
let acme: ScopeClient;
let apiUrl: string;
let cluster: LocalCluster;

beforeAll(async () => {
  cluster = await startCluster(3);
  track(cluster, () => cluster.stop());
  h = await useHarness({ REDIS_URL: cluster.url });
  apiUrl = (await h.startApi()).url;
  acme = await h.client(apiUrl, 'acme');
}, 90_000);

it('submit → stream → finish on a cluster, for scopes that hash to different nodes', async () => {
  const w = await h.startWorker();
  for (const scope of ['acme', 'globex', 'initech', 'umbrella']) {
    const c = await h.client(apiUrl, scope);
    // Slow enough that most tokens reach the reader live, through the cluster-wide PUBLISH.
    const content = `hello ${scope} on a cluster of three masters`;
    const sub = await c.submit('s1', content, { metadata: { delayMs: 30 } });
    expect(sub.status).toBe(202);
    const sse = await c.sse(`/runs/${sub.body.id}/events`);
    expect(tokenText(sse.events)).toBe(content);
    expect(sse.events.at(-1)!.data.status).toBe('succeeded');
  }
  await w.close();
});

it('session FIFO on a cluster: history alternates in submission order', async () => {
  const w = await h.startWorker();
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) ids.push((await acme.submit('fifo', `turn ${i}`)).body.id);
  for (const id of ids) await acme.waitStatus(id, ['succeeded']);
  const { body } = await acme.get('/sessions/fifo/messages');
  expect(body.messages.map((m: any) => `${m.role}:${m.content}`)).toEqual(
    Array.from({ length: 6 }, (_, i) => [`user:turn ${i}`, `assistant:turn ${i}`]).flat(),
  );
  await w.close();
});

it('a SIGKILLed worker process on a cluster: another worker recovers the run', async () => {
  const child = await h.spawn('worker');
  const content = Array.from({ length: 40 }, (_, i) => `w${i}`).join(' ');
  const sub = await acme.submit('crash', content, { metadata: { delayMs: 100 } });
  await waitFor(async () => (await acme.get(`/runs/${sub.body.id}`)).body.status === 'running', 15_000, 'running');
  await child.kill('SIGKILL');
  const w = await h.startWorker();
  const run = await acme.waitStatus(sub.body.id, ['succeeded'], 30_000);
  expect(run.recoveries).toBeGreaterThanOrEqual(1);
  expect(run.result.answer).toBe(content);
  const sse = await acme.sse(`/runs/${sub.body.id}/events`);
  expect(sse.events.some((e) => e.event === 'status' && e.data.status === 'recovered')).toBe(true);
  await w.close();
});

it('schedules on a cluster: per-second ticks of scopes on different nodes each make one run, paused and deleted', async () => {
  const w = await h.startWorker();
  for (const scope of ['acme', 'globex', 'initech']) {
    const admin = await h.client(apiUrl, scope, 'admin');
    const made = await admin.post('/schedules', { cron: '* * * * * *', run: { sessionPerTick: true, input: { content: 'tick' }, runtime: h.runtime } });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const id = made.body.id as string;
    await waitFor(async () => ((await admin.get(`/schedules/${id}`)).body.fired >= 2) || undefined, 20_000, `${scope}: two ticks`);
    expect((await admin.post(`/schedules/${id}/pause`, {})).body.status).toBe('paused');
    const s = await waitFor(async () => {
      const pending = await h.redis.hexists(h.keys.scope(scope).schedule(id), 'pending');
      return pending ? undefined : (await admin.get(`/schedules/${id}`)).body;
    }, 10_000, 'no pending tick');
    expect((await admin.get(`/runs/${s.lastRunId}`)).body.metadata).toMatchObject({ scheduleId: id, scheduledFor: s.lastTick });
    expect((await admin.del(`/schedules/${id}`)).status).toBe(204);
  }
  await w.close();
});

it('a runtime\'s queue partitions on a cluster: each on a slot of its own, runs spread over them and all consumed', async () => {
  const w = await h.startWorker({ env: { QUEUE_PARTITIONS: '3' } });
  const events = (p: number) => `${h.keys.queuePrefix(h.runtime, p)}:echo:events`;
  const slots = await Promise.all([0, 1, 2].map((p) => h.redis.call('CLUSTER', 'KEYSLOT', events(p))));
  expect(new Set(slots).size).toBe(3);
  // The API reads the runtime's count again within PARTITIONS_TTL_MS.
  await sleep(PARTITIONS_TTL_MS + 100);
  const ids: string[] = [];
  for (let i = 0; i < 24; i++) ids.push((await acme.submit(`partitions-${i}`, `partition ${i}`)).body.id);
  for (const [i, id] of ids.entries()) expect((await acme.waitStatus(id, ['succeeded'])).result.answer).toBe(`partition ${i}`);
  for (const p of [0, 1, 2]) {
    const mine = ids.filter((id) => partitionOf(id, 3) === p).map((id) => jobId(id, 1));
    const added = (await h.redis.xrange(events(p), '-', '+')).map(([, f]) => f[f.indexOf('jobId') + 1]);
    expect(added).toEqual(expect.arrayContaining(mine));
  }
  await w.close();
});

it('LIVE_PUBSUB=sharded: a scope\'s notifications go by SPUBLISH to its node alone, and APIs of either setting stream them', async () => {
  const nodes = cluster.ports.map((port) => { const n = new Redis(port); return track(n, () => n.quit()); });
  const spublished = () => Promise.all(nodes.map(async (n) => (await commandStats(n)).get('spublish')?.calls ?? 0));
  const sharded = await h.startApi({ LIVE_PUBSUB: 'sharded' });
  const w = await h.startWorker({ env: { LIVE_PUBSUB: 'sharded' } });
  // Through an API left `classic` (as one not yet restarted) and one set `sharded`: both hear it.
  for (const [i, url] of [apiUrl, sharded.url].entries()) {
    const scope = `sharded-${i}`;
    const c = await h.client(url, scope);
    const before = await spublished();
    const content = `sharded notifications through api ${i}`;
    const sub = await c.submit('s1', content, { metadata: { delayMs: 30 } });
    const sse = await c.sse(`/runs/${sub.body.id}/events`);
    expect(tokenText(sse.events)).toBe(content);
    expect(sse.events.at(-1)!.data.status).toBe('succeeded');
    const after = await spublished();
    const carried = after.flatMap((n, j) => (n > before[j] ? [j] : []));
    // One node carried them: the one that holds the scope's slot.
    expect(carried).toHaveLength(1);
    const slot = await h.redis.call('CLUSTER', 'KEYSLOT', h.keys.scope(scope).live);
    expect(Number(await nodes[carried[0]].call('CLUSTER', 'COUNTKEYSINSLOT', String(slot)))).toBeGreaterThan(0);
  }
  // Each API counts what it heard by kind: an operator's sign of which setting its publishers have.
  for (const url of [apiUrl, sharded.url]) {
    const { samples } = await scrape(`${url}/metrics`);
    expect(total(samples, 'baton_live_notifications_total', { kind: 'spublish' }), url).toBeGreaterThan(0);
  }
  await w.close();
  await sharded.close();
});
