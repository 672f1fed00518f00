import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startRestartableRedis, type RestartableRedis } from '../bench/restartable-redis.ts';
import { freePort } from '../src/cli/local-redis.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { classify } from '../src/lib/sdk/retry-policy.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { sleep, useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * What the chaos soak (bench/soak.ts) found, each pinned down by a deterministic test
 * against a real Redis. This file brings its own redis-server, because it kills it.
 */
let rr: RestartableRedis;
let h: Harness;

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'baton-soak-findings-'));
  rr = await startRestartableRedis(dir);
  // Tracked before the harness, so it is stopped after the harness closed its connections.
  track(rr, async () => { await rr.stop(); rmSync(dir, { recursive: true, force: true }); });
  // A 6 s lease outlives the Redis outage below: the attempt that streamed must be the one that finishes.
  h = await useHarness({ REDIS_URL: rr.url, LEASE_MS: '6000' });
});

afterAll(async () => {
  if (!rr.running) await rr.start();
});

it('a command ioredis gives up on while Redis is away classifies as transient, so the run is retried, not failed', async () => {
  const redis = new Redis(await freePort(), '127.0.0.1', { maxRetriesPerRequest: 0, retryStrategy: () => 50, lazyConnect: true });
  redis.on('error', () => {});
  try {
    redis.connect().catch(() => {});
    const err = await redis.get('k').then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(classify(err)).toMatchObject({ kind: 'transient', code: 'REDIS_UNAVAILABLE' });
  } finally {
    redis.disconnect();
  }
});

it('tokens emitted just before a finish that meets a Redis restart still reach the stream before the end event', async () => {
  let reached!: () => void;
  const atGate = new Promise<void>((r) => { reached = r; });
  let open!: () => void;
  const gate = new Promise<void>((r) => { open = r; });
  const answer = 'written while redis was down';
  const lastWords = defineAgent({
    name: 'last-words',
    async run(ctx) {
      reached();
      await gate;
      // Emitted and returned at once: the tokens are still queued when the finish begins.
      ctx.emit(answer);
      return answer;
    },
  });
  const api = await h.startApi();
  await h.startWorker({ agents: [lastWords] });
  const acme = await h.client(api.url, 'acme');
  const sub = await acme.submit('s1', 'go', { agent: 'last-words' });
  expect(sub.status).toBe(202);
  await atGate;

  await rr.kill();
  open();
  // Long enough for the event write to fail (ioredis gives up after its third reconnect,
  // ~0.7 s), short of the 6 s lease. This is the fault's length, not an assertion.
  await sleep(1_500);
  await rr.start();

  const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
  expect(run).toMatchObject({ status: 'succeeded', recoveries: 0, result: { answer } });
  const sse = await acme.sse(`/runs/${sub.body.id}/events`);
  expect(sse.ended).toBe(true);
  expect(tokenText(sse.events)).toBe(answer);
});

it('listing runs while reads fail keeps every run in the listing (a failed read is not an expired run)', async () => {
  const api = await h.startApi();
  const acme = await h.client(api.url, 'acme');
  for (const s of ['l1', 'l2', 'l3']) expect((await acme.submit(s, 'stay listed')).status).toBe(202);
  const index = h.keys.scope('acme').runs;
  const before = await h.redis.zcard(index);

  // A user whose HMGET is refused (a listing reads the fields it shows with it) makes every run
  // read fail while the index stays readable: the same shape as a Redis restart between the
  // index read and the record reads.
  const user = `lister-${randomBytes(4).toString('hex')}`;
  await h.redis.acl('SETUSER', user, 'on', 'nopass', '~*', '&*', '+@all', '-hmget');
  const limited = createRedis({ url: rr.url.replace('redis://', `redis://${user}:x@`), name: 'limited' });
  track(limited, () => limited.quit());
  track(user, () => h.redis.acl('DELUSER', user));
  const store = new RunStore(limited, h.keys, h.config, gateways(limited, h.keys, h.config, new Dispatcher(limited, h.keys)).api);

  await expect(store.list('acme', { limit: 50 })).rejects.toThrow(/NOPERM|no permissions/i);
  expect(await h.redis.zcard(index)).toBe(before);
  const listed = await acme.get('/runs?limit=50');
  expect(listed.body.runs.length).toBe(before);
});

it('the harness Redis of this file comes back with its data after a SIGKILL', async () => {
  await h.redis.set(`${h.prefix}:durable`, 'yes');
  await rr.kill();
  await rr.start();
  expect(await waitFor(() => h.redis.get(`${h.prefix}:durable`).catch(() => null), 10_000, 'redis back')).toBe('yes');
});
