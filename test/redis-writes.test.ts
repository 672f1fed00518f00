import { afterAll, beforeAll, expect, it } from 'vitest';
import { createRedis, type Redis } from '../src/lib/redis.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/**
 * The connections createRedis opens send the commands of one tick together (coalesceWrites in
 * src/lib/redis.ts): a lone command goes at once, the rest of a tick wait in the corked socket
 * until the tick ends, and the replies come back in order, on every socket of a reconnect too.
 */
let h: Harness;
let redis: Redis;

beforeAll(async () => {
  h = await useHarness();
  redis = createRedis({ url: h.redisUrl, name: 'test-writes' });
  await waitFor(() => redis.status === 'ready', 10_000, 'connection ready');
});

afterAll(async () => {
  await redis.quit();
});

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

/** 20 INCRs in one tick: returns their replies, after checking how they were written. */
async function burst(key: string): Promise<number[]> {
  const socket = redis.stream;
  const replies = Promise.all(range(0, 20).map(() => redis.incr(key)));
  expect(socket.writableCorked).toBe(1);
  expect(socket.writableLength).toBeGreaterThan(0);
  // The end of the tick (a nextTick queued before this one) sends them.
  await new Promise((r) => process.nextTick(r));
  expect(socket.writableCorked).toBe(0);
  expect(socket.writableLength).toBe(0);
  return replies;
}

it('sends the commands of one tick in one write, in order; a lone command at once', async () => {
  const key = `${h.prefix}:writes`;
  expect(await burst(key)).toEqual(range(1, 20));
  const lone = redis.get(key);
  expect(redis.stream.writableCorked).toBe(0);
  expect(redis.stream.writableLength).toBe(0);
  expect(await lone).toBe('20');
});

it('does the same on the socket of a reconnect', async () => {
  const key = `${h.prefix}:writes-again`;
  const before = redis.stream;
  const id = await redis.client('ID');
  await h.redis.client('KILL', 'ID', String(id));
  await waitFor(() => redis.status === 'ready' && redis.stream !== before, 10_000, 'reconnected');
  expect(await burst(key)).toEqual(range(1, 20));
});
