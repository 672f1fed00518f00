import { beforeAll, describe, expect, it } from 'vitest';
import { hold, staleWriter } from './fixtures/engine-agents.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { LeaseKeeper } from '../src/lib/engine/lease-keeper.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis, waitReady } from '../src/lib/redis/redis.ts';
import { RunExecutor } from '../src/lib/engine/executor.ts';
import { RedisArtifactStore } from '../src/lib/artifacts/redis-store.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { LeaseLostError } from '../src/lib/transitions/script-codes.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { fx, fxList, fxSet, useFixturesInProcess } from './helpers/engine.ts';
import { track } from './helpers/resources.ts';
import { fullLog } from './helpers/stream-check.ts';
import { parseNotification, type LiveBatch } from '../src/lib/streams/log.ts';

/**
 * The lease bookkeeping inside one worker process. These drive a RunExecutor directly
 * (no BullMQ), so the test decides exactly which deliveries arrive and when.
 */
let h: Harness;
let acme: ScopeClient;
let apiUrl: string;

beforeAll(async () => {
  h = await useHarness();
  useFixturesInProcess(h);
  const api = await h.startApi({ SWEEP_INTERVAL_MS: '0' });
  apiUrl = api.url;
  acme = await h.client(api.url, 'acme');
});

/** Redis's clock, epoch ms: the time the transitions stamp with. */
async function redisMs(): Promise<number> {
  const [sec, micro] = await h.redis.time();
  return Number(sec) * 1000 + Math.floor(Number(micro) / 1000);
}

async function executorFor(heartbeatMs: number) {
  const log = createLogger('silent');
  const config = h.configWith({ LEASE_MS: '3000', HEARTBEAT_MS: String(heartbeatMs) });
  const redis = createRedis({ url: h.redisUrl, name: 'lease-test' });
  const sub = createRedis({ url: h.redisUrl, name: 'lease-test-sub', blocking: true });
  await waitReady(redis);
  const dispatcher = new Dispatcher(redis, h.keys);
  const g = gateways(redis, h.keys, config, dispatcher);
  const leases = new LeaseKeeper(g.worker, sub, h.keys.cancelChannel, config.LEASE_MS, config.HEARTBEAT_MS, log);
  await leases.start();
  track(leases, async () => {
    await leases.stop();
    await dispatcher.close();
    await Promise.all([redis.quit(), sub.quit()]);
  });
  const executor = new RunExecutor({
    redis, keys: h.keys, config, transitions: g.worker, flow: g.flow, leases,
    agents: new Map([[hold.name, hold], [staleWriter.name, staleWriter]]), workerId: 'w-test', log,
    artifacts: new RedisArtifactStore(redis, h.keys, g.api, config),
  });
  return { executor, leases };
}

/** Claims a run the way a worker would, from the test (no agent runs). */
async function claimAsGhost(runId: string, scope = 'acme') {
  const reply = await h.gateways().worker.claim({ scope, runId }, 'ghost', {});
  if (reply.kind !== 'claimed') throw new Error(`the ghost's claim answered ${reply.kind}`);
  return new Attempt(reply.run, reply.fence, h.keys.scope(scope));
}

describe('leases within one process', () => {
  it('a second claim by the same process supersedes its first attempt, and keeps its own lease', async () => {
    const { executor, leases } = await executorFor(100);
    // A runtime no worker serves: only this test's executor runs the run.
    const runId = (await acme.submit('same-proc', 'twice', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    const job = { scope: 'acme', runId, dispatch: 1 };
    const first = executor.execute(job);
    await waitFor(() => fx(h, runId, 'reached'), 10_000, 'the first attempt to start');

    // The process stalled past its lease (a long GC pause, say) and BullMQ delivered the run
    // to it again: this process now claims the run a second time, as a recovery.
    const rk = h.keys.scope('acme').run(runId);
    // No heartbeats from here on but the ones the test makes: a paused process sends none.
    await leases.stop();
    await h.redis.zadd(h.keys.scope('acme').leases, 1, runId);
    const second = executor.execute(job);
    await waitFor(async () => (await h.redis.hget(rk, 'fence')) === '2', 10_000, 'the second claim');

    // The first attempt lost its lease like any other loser: its signal aborts, it ends.
    expect(await first).toEqual({ kind: 'done' });
    // (The fixture records its abort without awaiting the write: wait for it to land.)
    const aborted = await waitFor(() => fx(h, runId, 'aborted'), 5_000, 'the first attempt to record its abort');
    expect(JSON.parse(aborted)).toMatchObject({ why: 'lease-lost' });
    // ...and its end did not take the second attempt's lease bookkeeping with it.
    expect(leases.size).toBe(1);
    const leaseOf = async () => Number(await h.redis.zscore(h.keys.scope('acme').leases, runId));
    const renewed = await leaseOf();
    await waitFor(async () => {
      await leases.beat();
      return (await leaseOf()) > renewed;
    }, 5_000, 'a heartbeat of the second attempt');

    await fxSet(h, runId, 'go');
    expect(await second).toEqual({ kind: 'done' });
    expect(await acme.waitStatus(runId, ['succeeded', 'failed'])).toMatchObject({ status: 'succeeded', recoveries: 1 });
    expect(leases.size).toBe(0);
  });

  it('an attempt that lost its lease runs no further step bodies', async () => {
    const { executor, leases } = await executorFor(100);
    const runId = (await acme.submit('no-steps', 'stale', { agent: 'fx-stale', runtime: `solo-${h.prefix}` })).body.id as string;
    const job = { scope: 'acme', runId, dispatch: 1 };
    const first = executor.execute(job);
    await waitFor(() => fx(h, runId, 'reached-in-process'), 10_000, 'the first attempt to wait after step one');
    await leases.stop();
    await h.redis.zadd(h.keys.scope('acme').leases, 1, runId);
    const second = executor.execute(job);
    expect(await first).toEqual({ kind: 'done' });
    // The superseded attempt went on to its next step: refused before the body ran.
    const outcome = await waitFor(async () => {
      const o = await fxList(h, runId, 'outcome-in-process');
      return o.length === 2 ? o : undefined;
    }, 10_000, 'the first attempt to try its next step');
    expect(outcome).toEqual(['aborted-while-waiting', 'step-refused:AbortError']);
    expect(await fx(h, runId, 'two-in-process')).toBeNull();
    await fxSet(h, runId, 'go');
    expect(await second).toEqual({ kind: 'done' });
    expect(await fx(h, runId, 'two-in-process')).toBe('1');
    expect(await fx(h, runId, 'one')).toBe('1');
    expect((await acme.waitStatus(runId, ['succeeded', 'failed'])).result.answer).toBe('[in-process] answer');
  });

  it('a heartbeat racing the attempt\'s own closing transition is not a lost lease', async () => {
    const { leases } = await executorFor(2500);
    const runId = (await acme.submit('beat-race', 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    const attempt = await claimAsGhost(runId);
    leases.hold(attempt);
    // The attempt finished; the beat was already on its way before its entry was released.
    await h.gateways().worker.of(attempt).finish({ status: 'succeeded', result: '{"answer":"x","finishReason":"stop","toolCallsSeen":0}' });
    await leases.beat();
    expect(attempt.signal.aborted).toBe(false);
    leases.release(attempt);
  });

  it('one beat answers every held run by its own state, across scopes', async () => {
    const globex = await h.client(apiUrl, 'globex');
    const submit = async (c: ScopeClient, name: string) =>
      (await c.submit(name, 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    const t = h.gateways();
    const renewed = await claimAsGhost(await submit(acme, 'beat-many-1'));
    const cancelled = await claimAsGhost(await submit(acme, 'beat-many-2'));
    const closed = await claimAsGhost(await submit(acme, 'beat-many-3'));
    const lostId = await submit(acme, 'beat-many-4');
    const lost = await claimAsGhost(lostId);
    const elsewhere = await claimAsGhost(await submit(globex, 'beat-many-5'), 'globex');
    await h.redis.hset(cancelled.runKey, 'cancelRequested', '1');
    await t.worker.of(closed).finish({ status: 'succeeded', result: '{"answer":"x","finishReason":"stop","toolCallsSeen":0}' });
    // Its lease ran out and another claim took the run over: the first holder lost it.
    await h.redis.zadd(lost.keys.leases, 1, lostId);
    const takeover = await claimAsGhost(lostId);
    // Redis's clock (the one the transitions read) before the beat: each deadline it sets is later.
    const before = await redisMs();
    const replies = await t.worker.heartbeat([renewed, closed, lost, elsewhere, cancelled, takeover]);
    expect(replies).toEqual([
      { kind: 'renewed', cancelRequested: false },
      { kind: 'closed' },
      { kind: 'lost' },
      { kind: 'renewed', cancelRequested: false },
      { kind: 'renewed', cancelRequested: true },
      { kind: 'renewed', cancelRequested: false },
    ]);
    // Each renewed lease moved in its scope's lease index (the only place a lease's deadline
    // is kept), those of a scope to the one time its call read; the records were not written.
    const deadlines = new Map<string, Set<number>>();
    for (const a of [renewed, elsewhere, cancelled, takeover]) {
      const expires = Number(await h.redis.zscore(a.keys.leases, a.runId));
      expect(expires).toBeGreaterThan(before);
      deadlines.set(a.keys.leases, (deadlines.get(a.keys.leases) ?? new Set()).add(expires));
      expect(await h.redis.hexists(a.runKey, 'leaseExpiresAt')).toBe(0);
    }
    expect([...deadlines.values()].map((d) => d.size)).toEqual([1, 1]);
    expect(await h.redis.zscore(closed.keys.leases, closed.runId)).toBeNull();
  });

  it('a lease the sweeper found over is taken over by the next claim, unless its holder beats first', async () => {
    const t = h.gateways();
    const submit = async (name: string) => (await acme.submit(name, 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    const lapse = async (a: Attempt) => {
      await h.redis.zadd(a.keys.leases, 1, a.runId);
      const before = await redisMs();
      expect(await t.sweeper.repair('acme', a.runId)).toBe(true);
      // The index now says when the sweeper looks again (after the repair); the record keeps the lapse.
      expect(Number(await h.redis.zscore(a.keys.leases, a.runId))).toBeGreaterThan(before);
      expect(await h.redis.hget(a.runKey, 'leaseLapsed')).toBe('1');
    };

    // The holder is gone: the claim the repair's job brings takes the run over.
    const deadId = await submit('lapsed-dead');
    const dead = await claimAsGhost(deadId);
    await lapse(dead);
    const taken = await t.worker.claim({ scope: 'acme', runId: deadId }, 'next', {});
    expect(taken).toMatchObject({ kind: 'claimed', recovered: true, fence: dead.fence + 1 });
    expect(await h.redis.hexists(dead.runKey, 'leaseLapsed')).toBe(0);
    expect(await t.worker.heartbeat([dead])).toEqual([{ kind: 'lost' }]);

    // The holder was only slow: its next beat renews the lease and the claim waits.
    const slowId = await submit('lapsed-slow');
    const slow = await claimAsGhost(slowId);
    await lapse(slow);
    expect(await t.worker.heartbeat([slow])).toEqual([{ kind: 'renewed', cancelRequested: false }]);
    expect(await h.redis.hexists(slow.runKey, 'leaseLapsed')).toBe(0);
    expect(await t.worker.claim({ scope: 'acme', runId: slowId }, 'next', {})).toMatchObject({ kind: 'later' });
    expect(await h.redis.hget(slow.runKey, 'fence')).toBe(String(slow.fence));
  });

  it('every live notification names the log entry just before its events, across attempts and hand-overs', async () => {
    // The holder's appends and finish take the log's tail from the record (`logTail`, set by
    // the claim) instead of reading the log; transitions between attempts add events too.
    const t = h.gateways();
    const runId = (await acme.submit('tail-chain', 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    const sub = createRedis({ url: h.redisUrl, name: 'tail-chain-sub', blocking: true });
    track(sub, () => sub.quit());
    const notes: LiveBatch[] = [];
    // The scope's channel carries every run's batches: this run's, one per call.
    sub.on('message', (_ch: string, msg: string) => {
      const mine = parseNotification(msg).get(runId);
      if (mine) notes.push(mine);
    });
    await sub.subscribe(h.keys.scope('acme').live);
    const token = (text: string): [string, string][] => [['token', JSON.stringify({ text })]];

    const first = await claimAsGhost(runId);
    await t.worker.append(first, 1, token('a'));
    await t.worker.append(first, 2, token('b'));
    await t.worker.of(first).retry({ delayMs: 0, lastError: '{"code":"X","message":"x"}' });
    const second = await claimAsGhost(runId);
    await t.worker.append(second, 1, token('c'));
    await t.worker.of(second).release();
    const third = await claimAsGhost(runId);
    await t.worker.append(third, 1, token('d'));
    await t.worker.of(third).finish({ status: 'succeeded', result: '{"answer":"d","finishReason":"stop","toolCallsSeen":0}' }, { no: 2, events: token('e') });

    const log = await fullLog(h, 'acme', runId);
    const ids = log.map((e) => e.id);
    await waitFor(() => notes.some((n) => n.events.some((e) => e.type === 'end')), 5_000, 'the end notification');
    // Every event after the submit's came in exactly one notification, in log order...
    expect(notes.flatMap((n) => n.events.map((e) => e.id))).toEqual(ids.slice(1));
    // ...and each notification's prev is the entry just before its first event.
    for (const n of notes) expect(n.prev).toBe(ids[ids.indexOf(n.events[0].id) - 1]);
    expect(log.filter((e) => e.type === 'token').map((e) => (e.data as { text: string }).text)).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  it('the finish writes the last batch it carries once, before `end`, also when an append applied it already', async () => {
    const t = h.gateways();
    const result = '{"answer":"ab","finishReason":"stop","toolCallsSeen":0}';
    const texts = async (runId: string) => (await h.redis.xrange(h.keys.scope('acme').run(runId) + ':events', '-', '+'))
      .map(([, f]) => (f[1] === 'token' ? JSON.parse(f[3]).text : f[1] === 'end' ? '<end>' : undefined)).filter((x) => x !== undefined);
    // Carried by the finish alone.
    const carried = await claimAsGhost((await acme.submit('final-batch-1', 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id);
    await t.worker.append(carried, 1, [['token', '{"text":"a"}']]);
    await t.worker.of(carried).finish({ status: 'succeeded', result }, { no: 2, events: [['token', '{"text":"b"}']] });
    expect(await texts(carried.runId)).toEqual(['a', 'b', '<end>']);
    // Written by an append whose reply was lost, then carried by the finish too: once.
    const again = await claimAsGhost((await acme.submit('final-batch-2', 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id);
    await t.worker.append(again, 1, [['token', '{"text":"a"}']]);
    await t.worker.of(again).finish({ status: 'succeeded', result }, { no: 1, events: [['token', '{"text":"a"}']] });
    expect(await texts(again.runId)).toEqual(['a', '<end>']);
  });

  it('a lease handed over at shutdown can be neither renewed nor written with', async () => {
    const runId = (await acme.submit('released', 'x', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    const attempt = await claimAsGhost(runId);
    const t = h.gateways();
    await t.worker.of(attempt).release();
    const leaseOf = async () => Number(await h.redis.zscore(attempt.keys.leases, runId));
    const endedAt = await leaseOf();
    // A beat that was in flight during the hand-over must not revive the lease...
    expect(await t.worker.heartbeat([attempt])).toEqual([{ kind: 'closed' }]);
    expect(await leaseOf()).toBe(endedAt);
    // ...and the released holder can no longer write.
    await expect(t.worker.of(attempt).step({ op: 'done', stepKey: 'step:x:1', result: '{"v":1}' })).rejects.toBeInstanceOf(LeaseLostError);
    await expect(t.worker.append(attempt, 1, [['token', '{"text":"late"}']])).rejects.toBeInstanceOf(LeaseLostError);
  });

  it('after the shutdown deadline, a run claimed late is handed over at once', async () => {
    const { executor, leases } = await executorFor(500);
    leases.abortAll('shutdown');
    const runId = (await acme.submit('late-claim', 'too late', { agent: 'fx-hold', runtime: `solo-${h.prefix}` })).body.id as string;
    expect(await executor.execute({ scope: 'acme', runId, dispatch: 1 })).toEqual({ kind: 'done' });
    const run = await h.redis.hgetall(h.keys.scope('acme').run(runId));
    // Released: still running, but with no holder (a claim takes it over at once), and a new job ordered.
    expect(run).toMatchObject({ status: 'running', leaseOwner: '', dispatch: '2' });
  });
});
