import { beforeAll, describe, expect, it } from 'vitest';
import { EventFollower } from '../src/lib/streams/follower.ts';
import { EventHub } from '../src/lib/streams/hub.ts';
import type { RunEvent } from '../src/lib/streams/log.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis, waitReady, type Redis } from '../src/lib/redis/redis.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { track } from './helpers/resources.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { expectExactly, fullLog, seen, words, type Seen } from './helpers/stream-check.ts';

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker();
  acme = await h.client(api.url, 'acme', 'client');
});

/** Follows a run's log from the start through `hub`, collecting what it delivers. */
async function follow(redis: Redis, hub: EventHub, runId: string) {
  const followed = { got: [] as Seen[], ended: false, follower: undefined as unknown as EventFollower };
  followed.follower = new EventFollower({
    redis, keys: h.keys, hub, scope: 'acme', runId, afterId: '0',
    deliver: (events: RunEvent[]) =>
      followed.got.push(...events.map((e) => ({ id: e.id, type: e.type, data: JSON.parse(e.data.toString()) }))),
    onEnd: () => { followed.ended = true; },
    onError: (err) => { throw err; },
  });
  await followed.follower.start();
  return followed;
}

describe('replay → live hand-off', () => {
  it('readers joining at random moments while tokens flow get no gap and no duplicate (6 runs × 30 readers)', async () => {
    const rounds = 6;
    const readersPerRound = 30;
    let fromStart = 0;
    let fromId = 0;
    for (let round = 0; round < rounds; round++) {
      const content = words(400, `r${round}-`);
      const sub = await acme.submit(`race-${round}`, content, { metadata: { delayMs: 2 } });
      const runId = sub.body.id as string;
      const key = h.keys.scope('acme').events(runId);
      const readers = Array.from({ length: readersPerRound }, async () => {
        await sleep(Math.random() * 1200);
        // Half start from the beginning, half from an id that exists at the moment they join.
        let after: string | undefined;
        if (Math.random() < 0.5) {
          const ids = (await h.redis.xrange(key, '-', '+')).map(([id]) => id);
          after = ids[Math.floor(Math.random() * ids.length)];
        }
        const r = await acme.sse(`/runs/${runId}/events`, { lastEventId: after });
        return { after: after ?? '0', events: seen(r.events), ended: r.ended, status: r.status };
      });
      const results = await Promise.all(readers);
      const log = await fullLog(h, 'acme', runId);
      expect(log.at(-1)!.type).toBe('end');
      for (const r of results) {
        if (r.after === log.at(-1)!.id) {
          // Joined after the run ended, from the `end` event's own id: nothing is left to send.
          expect(r.status).toBe(204);
          expect(r.events).toEqual([]);
          continue;
        }
        expect(r.ended).toBe(true);
        expectExactly(r.events, log, r.after);
        if (r.after === '0') {
          fromStart++;
          expect(tokenText(r.events.map((e) => ({ id: e.id, event: e.type, data: e.data })))).toBe(content);
        } else {
          fromId++;
        }
      }
    }
    console.log(`hand-off race: ${rounds * readersPerRound} readers (${fromStart} from the start, ${fromId} from an id), all exact`);
  });

  it("the process's subscriber connection is killed mid-stream: a follower resyncs from the log and misses nothing", async () => {
    const log = createLogger('silent');
    const redis = createRedis({ url: h.redisUrl, name: 'test-follow' });
    const tag = h.prefix;
    const sub = createRedis({ url: h.redisUrl, name: `test-sub-${tag}`, blocking: true });
    track(redis, () => redis.quit());
    track(sub, () => sub.quit());
    await Promise.all([waitReady(redis), waitReady(sub)]);
    const hub = new EventHub(sub, log);

    const content = words(600, 'kill');
    const submitted = await acme.submit('sub-kill', content, { metadata: { delayMs: 2 } });
    const runId = submitted.body.id as string;
    const followed = await follow(redis, hub, runId);
    const { got, follower } = followed;
    let kills = 0;
    for (const at of [20, 60]) {
      await waitFor(() => got.length >= at || followed.ended, 20_000, `${at} events`);
      if (followed.ended) break;
      // A subscribed connection cannot run CLIENT ID: find it by its (unique) name.
      const list = (await redis.client('LIST')) as string;
      const line = list.split('\n').find((l) => l.includes(`name=baton:test-sub-${tag} `));
      const id = /(?:^|\s)id=(\d+)/.exec(line ?? '')?.[1];
      if (!id) throw new Error('subscriber connection not found');
      await redis.client('KILL', 'ID', id);
      kills++;
    }
    await waitFor(() => followed.ended, 30_000, 'the end event');
    await follower.stop();
    expect(kills).toBeGreaterThan(0);
    expectExactly(got, await fullLog(h, 'acme', runId));
    expect(got.filter((e) => e.type === 'token').map((e) => (e.data as { text: string }).text).join('')).toBe(content);
    expect(hub.listenerCount).toBe(0);
    console.log(`subscriber killed ${kills}x mid-stream: ${got.length} events delivered exactly once`);
  });

  it('a notification that never arrived is noticed by the next batch (its prev id) and read from the log', async () => {
    const { sk, runId, append, followed } = await followOwnRun('gap');
    const { got } = followed;
    // An event lands in the log without its notification (as if the message was lost): written
    // as the holder's append writes it, the record's logTail following it, but not published.
    const lost = await h.redis.xadd(sk.events(runId), '*', 'type', 'token', 'data', JSON.stringify({ text: 'b' }));
    await h.redis.hset(sk.run(runId), 'logTail', lost!);
    await append(2, 'token', { text: 'c' });
    await append(3, 'end', { status: 'succeeded' });
    await waitFor(() => followed.ended, 5_000, 'the end event');
    expectExactly(got, await fullLog(h, 'acme', runId));
    expect(got.map((e) => (e.data as { text?: string }).text ?? e.type)).toEqual(['a', 'b', 'c', 'end']);
  });

  it('the last events, announced while a Cluster\'s sharded subscribers moved, are read once ioredis says they are subscribed again', async () => {
    const { sub, sk, runId, followed } = await followOwnRun('moved');
    const { got } = followed;
    // The run's last events land in the log while its notifications reach no subscriber (a
    // Cluster's primary failing over): no later notification will say they were missed.
    await h.redis.xadd(sk.events(runId), '*', 'type', 'token', 'data', JSON.stringify({ text: 'b' }));
    const end = await h.redis.xadd(sk.events(runId), '*', 'type', 'end', 'data', JSON.stringify({ status: 'succeeded' }));
    await h.redis.hset(sk.run(runId), 'logTail', end!);
    await sleep(200);
    expect(got).toHaveLength(1);
    // What an ioredis Cluster emits once it has subscribed its sharded subscribers again.
    sub.emit('subscribersReady');
    await waitFor(() => followed.ended, 5_000, 'the end event');
    expectExactly(got, await fullLog(h, 'acme', runId));
    expect(got.map((e) => (e.data as { text?: string }).text ?? e.type)).toEqual(['a', 'b', 'end']);
  });
});

/**
 * A running run of this test's own (its record written as a claim leaves it, fence 1), its
 * first token appended, and a follower on a hub of a subscriber connection of its own that
 * has replayed that token: the run's keys, an append as its holder's, and the follower.
 */
async function followOwnRun(name: string) {
  const redis = createRedis({ url: h.redisUrl, name: `test-${name}` });
  const sub = createRedis({ url: h.redisUrl, name: `test-${name}-sub`, blocking: true });
  track(redis, () => redis.quit());
  track(sub, () => sub.quit());
  await Promise.all([waitReady(redis), waitReady(sub)]);
  const hub = new EventHub(sub, createLogger('silent'));
  const runId = `${name}-${h.prefix}`;
  const sk = h.keys.scope('acme');
  await h.redis.hset(sk.run(runId), { status: 'running', fence: '1', leaseOwner: 'test-worker' });
  const attempt = new Attempt({ id: runId, scope: 'acme', sessionId: 's', runtime: h.runtime }, 1, sk);
  const t = h.gateways();
  const append = (n: number, type: string, data: unknown) => t.worker.append(attempt, n, [[type, JSON.stringify(data)]]);
  await append(1, 'token', { text: 'a' });
  const followed = await follow(redis, hub, runId);
  await waitFor(() => followed.got.length === 1, 5_000, 'the replayed event');
  return { sub, sk, runId, append, followed };
}
