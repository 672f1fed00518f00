import { beforeAll, describe, expect, it } from 'vitest';
import { ownRedis, useHarness, type Harness } from './helpers/harness.ts';
import { keySpaceOf } from './helpers/key-space.ts';

/**
 * The check the fuzz file makes after every refusal ("a refusal writes nothing") answers from
 * a count of Redis's keyspace notifications when nothing was written. It still fails for each
 * kind of write a refusal could make, and lets pass only what it always let pass: a read, and
 * a key whose own TTL ran out.
 */
let h: Harness;
const space = keySpaceOf(() => h);

beforeAll(async () => {
  h = await useHarness({ REDIS_URL: await ownRedis(), SWEEP_INTERVAL_MS: '0', FAIR_SHARE_INTERVAL_MS: '0' });
  await space.watchWrites();
  await h.redis.set(`${h.prefix}:kept`, 'v');
  await h.redis.hset(`${h.prefix}:hash`, 'a', '1', 'b', '2');
});

const gone = async (key: string) => {
  // Counted, not timed: the key is gone when Redis says so.
  while (await h.redis.exists(key)) await new Promise((r) => setTimeout(r, 20));
};

describe('a refusal writes nothing: the key-space check', () => {
  it('passes when nothing was written, or only read, however many times it is asked', async () => {
    const before = await space.snapshot();
    for (let i = 0; i < 50; i++) {
      await h.redis.hgetall(`${h.prefix}:hash`);
      await space.expectUnchangedSince(before, 'nothing written');
    }
  });

  it.each([
    ['a key added', () => h.redis.set(`${h.prefix}:added`, '1')],
    ['a value changed', () => h.redis.set(`${h.prefix}:kept`, 'w')],
    ['a field added to a hash', () => h.redis.hset(`${h.prefix}:hash`, 'c', '3')],
    ['a key removed', () => h.redis.del(`${h.prefix}:kept`)],
  ])('fails for %s', async (_what, write) => {
    const before = await space.snapshot();
    await write();
    await expect(space.expectUnchangedSince(before, 'written')).rejects.toThrow();
  });

  it('passes a value written again as it was, which the count saw, by the comparison', async () => {
    await h.redis.set(`${h.prefix}:same`, 'x');
    const before = await space.snapshot();
    await h.redis.set(`${h.prefix}:same`, 'x');
    await space.expectUnchangedSince(before, 'the same value again');
  });

  it('lets a key go that its own TTL ended, and fails for one whose TTL was cut short', async () => {
    await h.redis.set(`${h.prefix}:brief`, '1', 'PX', 50);
    const before = await space.snapshot();
    await gone(`${h.prefix}:brief`);
    await space.expectUnchangedSince(before, 'a TTL ran out');
    await h.redis.set(`${h.prefix}:long`, '1', 'PX', 60_000);
    const withLong = await space.snapshot();
    await h.redis.pexpire(`${h.prefix}:long`, 1);
    await gone(`${h.prefix}:long`);
    await expect(space.expectUnchangedSince(withLong, 'a TTL cut short')).rejects.toThrow();
  });
});
