import { beforeAll, describe, expect, it } from 'vitest';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { libraryName } from '../src/lib/transitions/scripts.ts';
import type { Submissions } from '../src/lib/engine/submissions.ts';
import type { Gateways } from '../src/lib/transitions/gateways.ts';
import { ownRedis, useHarness, type Harness } from './helpers/harness.ts';
import { doorOf } from './helpers/submit.ts';

/**
 * The transitions are a Redis Function library, loaded into a server by the first call that
 * finds it missing. A Redis restarted without persistence, or flushed, has none: calls and
 * heartbeats go on all the same, and calls that find it missing together load it once. This
 * file has a redis-server of its own, so INFO commandstats counts only its loads.
 */
let h: Harness;
let door: Submissions;
let transitions: Gateways;

beforeAll(async () => {
  h = await useHarness({ REDIS_URL: await ownRedis(), SWEEP_INTERVAL_MS: '0', FAIR_SHARE_INTERVAL_MS: '0', MAX_ACTIVE_PER_SCOPE: '1000', SUBMIT_RATE_PER_SEC: '0' });
  transitions = h.gateways();
  door = doorOf(h, { transitions: transitions.api });
});

async function libraryLoads(): Promise<number> {
  const m = /cmdstat_function\|load:calls=(\d+)/.exec(await h.redis.info('commandstats'));
  return m ? Number(m[1]) : 0;
}

const submit = (sessionId: string) => door.submit({ scope: 'acme', sessionId, input: { content: 'x' }, runtime: h.runtime, agent: 'echo' });

describe('the transitions library', () => {
  it('is loaded once by the calls that find it missing, and again after a FUNCTION FLUSH', async () => {
    await h.redis.function('FLUSH');
    await h.redis.config('RESETSTAT');
    const runs = await Promise.all(Array.from({ length: 50 }, (_, i) => submit(`first-${i}`)));
    expect(runs.every((r) => r.created && r.run.status === 'dispatched')).toBe(true);
    expect(await libraryLoads()).toBe(1);
    const [library] = (await h.redis.function('LIST', 'LIBRARYNAME', libraryName())) as unknown[][];
    expect(library).toContain(libraryName());

    // A server that lost it (a restart without persistence): the next call loads it again.
    await h.redis.function('FLUSH');
    expect((await submit('after-flush')).created).toBe(true);
    expect(await libraryLoads()).toBe(2);
  });

  it('a heartbeat that finds it missing loads it and beats again', async () => {
    const { run } = await submit('beat');
    const claim = await transitions.worker.claim({ scope: 'acme', runId: run.id }, 'w1', {});
    if (claim.kind !== 'claimed') throw new Error(`not claimed: ${claim.kind}`);
    const attempt = new Attempt(claim.run, claim.fence, h.keys.scope('acme'));
    await h.redis.function('FLUSH');
    const [reply] = await transitions.worker.heartbeat([attempt]);
    expect(reply.kind).toBe('renewed');
    // And a beat with the library there renews as before.
    expect((await transitions.worker.heartbeat([attempt]))[0].kind).toBe('renewed');
  });

  it('a claim and a finish that need no clock for their checks take their time from their first event, not TIME', async () => {
    const calls = async (command: string) => {
      const m = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await h.redis.info('commandstats'));
      return m ? Number(m[1]) : 0;
    };
    const { run } = await submit('clock');
    const before = await calls('time');
    const claim = await transitions.worker.claim({ scope: 'acme', runId: run.id }, 'w1', {});
    if (claim.kind !== 'claimed') throw new Error(`not claimed: ${claim.kind}`);
    await transitions.worker.of(new Attempt(claim.run, claim.fence, h.keys.scope('acme'))).finish({
      status: 'succeeded', result: '{"answer":"x","finishReason":"stop","toolCallsSeen":0}',
    });
    expect(await calls('time')).toBe(before);
    const sk = h.keys.scope('acme');
    const ms = (type: string) => h.redis.xrange(sk.events(run.id), '-', '+').then((log) => {
      const entry = log.find(([, fields]) => fields[1] === type);
      return entry ? Number(entry[0].split('-')[0]) : undefined;
    });
    const record = await h.redis.hgetall(sk.run(run.id));
    expect(Number(record.claimedAt)).toBe(await ms('attempt'));
    expect(Number(record.finishedAt)).toBe(await ms('end'));
  });
});
