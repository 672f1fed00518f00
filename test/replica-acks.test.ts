import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalRedis, type LocalRedis } from '../src/cli/local-redis.ts';
import { fxKey } from './fixtures/engine-agents.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { tokenText } from './helpers/http.ts';
import { commandStats } from '../bench/redis-stats.ts';
import { useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * REDIS_MIN_REPLICAS_ACK against a real primary and replica (two redis-servers of this
 * file). The replica is stopped with SIGSTOP, so it holds its link but acknowledges nothing:
 * what a replica far behind, or cut off, looks like to the primary's WAIT.
 */
const ENGINE_AGENTS = fileURLToPath(new URL('./fixtures/engine-agents.ts', import.meta.url));

let dir: string;
let primary: LocalRedis;
let replica: LocalRedis;
let onReplica: Redis;
let h: Harness;
let api: Child;
let acme: ScopeClient;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'baton-acks-'));
  primary = await startLocalRedis(join(dir, 'primary'));
  replica = await startLocalRedis(join(dir, 'replica'), ['--replicaof', '127.0.0.1', String(primary.port)]);
  onReplica = new Redis(replica.url, { maxRetriesPerRequest: 1 });
  await waitFor(async () => /master_link_status:up/.test(await onReplica.info('replication')), 15_000, 'the replica to sync');
  h = await useHarness({ REDIS_URL: primary.url, REDIS_MIN_REPLICAS_ACK: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '300' });
  api = await h.spawn('api');
  await h.spawn('worker', { agents: [ENGINE_AGENTS] });
  acme = await h.client(api.url!, 'acme');
}, 60_000);

afterAll(async () => {
  if (replica?.process.pid) process.kill(replica.process.pid, 'SIGCONT');
  onReplica?.disconnect();
  await replica?.stop();
  await primary?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const stopReplica = () => process.kill(replica.process.pid!, 'SIGSTOP');
const contReplica = () => process.kill(replica.process.pid!, 'SIGCONT');
const reached = (runId: string) => h.redis.get(fxKey(h.prefix, runId, 'reached'));
const count = async (runId: string, name: string) => Number(await h.redis.get(fxKey(h.prefix, runId, name)) ?? 0);

describe('REDIS_MIN_REPLICAS_ACK=1', () => {
  it('a 202 means the replica holds the run, and a step the agent went past is on the replica', async () => {
    const sub = await acme.submit('held', 'x', { agent: 'fx-memo' });
    expect(sub.status).toBe(202);
    // Read from the replica, not the primary: the acknowledgement is what this proves.
    expect(await onReplica.hget(h.keys.scope('acme').run(sub.body.id), 'status')).toBeTruthy();
    await waitFor(() => reached(sub.body.id), 15_000, 'the agent to pass its two steps');
    const steps = await onReplica.hkeys(h.keys.scope('acme').steps(sub.body.id));
    expect(steps.some((k) => k.includes('one'))).toBe(true);
    expect(steps.some((k) => k.includes('two'))).toBe(true);
    // A live reader: its notifications are published once the replica holds what they announce.
    const reading = acme.sse(`/runs/${sub.body.id}/events`);
    await h.redis.set(fxKey(h.prefix, sub.body.id, 'go'), '1');
    const done = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect(done.status).toBe('succeeded');
    const read = await reading;
    expect(read.ended).toBe(true);
    // Every event the reader was sent is in the replica's copy of the log, in the same order.
    const onTheReplica = (await onReplica.xrange(`${h.keys.scope('acme').run(sub.body.id)}:events`, '-', '+')).map(([id]) => id);
    const sent = read.events.map((e: { id?: string }) => e.id).filter(Boolean);
    expect(sent.length).toBeGreaterThan(0);
    expect(onTheReplica.slice(-sent.length)).toEqual(sent);
  }, 60_000);

  it('a submit no replica acknowledges is 503 REDIS_UNAVAILABLE; the retry with its idempotency key gets the same run, once', async () => {
    stopReplica();
    let refused;
    try {
      refused = await acme.post('/runs', { sessionId: 'unacked', input: { content: 'x' }, runtime: h.runtime, agent: 'fx-memo' }, { 'idempotency-key': 'unacked-1' });
    } finally {
      contReplica();
    }
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe('REDIS_UNAVAILABLE');
    const again = await acme.post('/runs', { sessionId: 'unacked', input: { content: 'x' }, runtime: h.runtime, agent: 'fx-memo' }, { 'idempotency-key': 'unacked-1' });
    expect(again.status).toBe(202);
    const runs = (await acme.get('/runs?sessionId=unacked')).body.runs;
    expect(runs.filter((r: any) => r.id === again.body.id)).toHaveLength(1);
  }, 60_000);

  it("a step's result no replica acknowledges fails its attempt transiently; the retry finds it memoized, and the run ends once the replica is back", async () => {
    const sub = await acme.submit('step-unacked', 'x', { agent: 'fx-memo' });
    expect(sub.status).toBe(202);
    const runId = sub.body.id;
    await waitFor(() => reached(runId), 15_000, 'the agent to pass its two steps');
    stopReplica();
    try {
      await h.redis.set(fxKey(h.prefix, runId, 'go'), '1');
      // Step three ran and its result is on the primary, but unacknowledged: a transient
      // failure of the attempt, which is retried (without REDIS_MIN_REPLICAS_ACK it would
      // have finished in its first attempt).
      await waitFor(async () => (await count(runId, 'three')) === 1, 15_000, 'step three to run');
      await waitFor(async () => (await acme.get(`/runs/${runId}`)).body.attempt >= 2, 15_000, 'a second attempt');
    } finally {
      contReplica();
    }
    const done = await acme.waitStatus(runId, ['succeeded', 'failed'], 30_000);
    expect(done.status).toBe('succeeded');
    expect(done.result.answer).toMatch(/three=1/);
    expect(await count(runId, 'three')).toBe(1);
    expect(await onReplica.hget(h.keys.scope('acme').run(runId), 'status')).toBe('succeeded');
  }, 60_000);

  it("a schedule's pause and a bulk operation no replica acknowledges are 503 REDIS_UNAVAILABLE; answered, the replica holds them", async () => {
    const sk = h.keys.scope('acme');
    const made = await acme.post('/schedules', { cron: '0 0 1 1 *', run: { sessionPerTick: true, input: { content: 'x' }, runtime: h.runtime } });
    expect(made.status).toBe(201);
    const bulk = { filter: { agent: 'fx-memo', sessionId: 'no-such-session' } };
    stopReplica();
    let pause;
    let operation;
    try {
      pause = await acme.post(`/schedules/${made.body.id}/pause`, {});
      operation = await acme.post('/runs/cancel', bulk);
    } finally {
      contReplica();
    }
    expect([pause.status, pause.body.error?.code]).toEqual([503, 'REDIS_UNAVAILABLE']);
    expect([operation.status, operation.body.error?.code]).toEqual([503, 'REDIS_UNAVAILABLE']);
    const paused = await acme.post(`/schedules/${made.body.id}/pause`, {});
    expect(paused.body.status).toBe('paused');
    // Read from the replica: the answer came once it held the write.
    expect(await onReplica.hget(sk.schedule(made.body.id), 'status')).toBe('paused');
    const again = await acme.post('/runs/cancel', bulk);
    expect(again.status).toBe(202);
    expect(await onReplica.hget(sk.operation(again.body.id), 'kind')).toBe('cancel');
  }, 60_000);

  it('with LIVE_PUBSUB=sharded, the notifications held for the replica go out by SPUBLISH once it holds them', async () => {
    // Served by this worker alone, so the run's writes are its (sharded) ones.
    const words = defineAgent({
      name: 'acks-words',
      async run(ctx) {
        for (const w of ['held ', 'then ', 'sharded']) {
          await new Promise((r) => setTimeout(r, 30));
          ctx.emit(w);
        }
        return 'done';
      },
    });
    const w = await h.startWorker({ agents: [words], env: { LIVE_PUBSUB: 'sharded' } });
    const spublished = async () => (await commandStats(h.redis)).get('spublish')?.calls ?? 0;
    const before = await spublished();
    const sub = await acme.submit('sharded-acks', 'x', { agent: 'acks-words' });
    const read = await acme.sse(`/runs/${sub.body.id}/events`);
    expect(tokenText(read.events)).toBe('held then sharded');
    expect(read.events.at(-1)!.data.status).toBe('succeeded');
    expect(await spublished()).toBeGreaterThan(before);
    await w.close();
  }, 60_000);

  it('a primary that refuses writes for want of replicas (min-replicas-to-write) gives 503 REDIS_UNAVAILABLE, not a 500', async () => {
    await h.redis.config('SET', 'min-replicas-to-write', '2');
    let refused;
    try {
      refused = await acme.submit('norep', 'x', { agent: 'fx-memo' });
    } finally {
      await h.redis.config('SET', 'min-replicas-to-write', '0');
    }
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe('REDIS_UNAVAILABLE');
  }, 30_000);
});
