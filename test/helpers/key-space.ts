import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import type { Harness } from './harness.ts';
import type { Redis } from '../../src/lib/redis/redis.ts';
import { track } from './resources.ts';

/** A file's key space at one moment: each key with a digest of its DUMP. */
export type KeySpace = Map<string, string>;

/** After how many checks answered by the write count one walks the keys all the same. */
const WALK_EVERY = 20;

/**
 * Snapshots of a file's key space (`h()`'s allKeys, read in one pipeline) and the check that
 * a request changed nothing in it. Each snapshot also notes when its keys with a TTL end by
 * themselves, so the check lets such a key vanish once that time has come.
 *
 * A file with a Redis of its own (ownRedis) may `watchWrites()`: Redis then publishes an event
 * for every write to a key (keyspace notifications), the file counts those to its keys, and
 * `expectUnchangedSince` answers from the count where it can: none since the snapshot, nothing
 * was written, and the walk of every key (milliseconds each, against thousands of refusals in
 * a fuzz file) is not needed. A count that moved (a write, a rewrite of the same value, a key
 * whose TTL ended) leaves the answer to the key-by-key comparison, and so does every
 * WALK_EVERY-th check, so a write that published nothing could not pass unseen for long.
 */
export function keySpaceOf(h: () => Harness) {
  /** When each key seen by the last snapshot expires by itself (epoch ms; keys with a TTL only). */
  const expiresAt = new Map<string, number>();
  /** Writes counted when each snapshot was taken, while watching. */
  const writesAt = new WeakMap<KeySpace, number>();
  let watcher: { sub: Redis; writes: number } | undefined;
  let checks = 0;

  /** Turns keyspace notifications on in the file's Redis and counts writes to its keys (call in beforeAll). */
  async function watchWrites(): Promise<void> {
    const harness = h();
    await harness.redis.config('SET', 'notify-keyspace-events', 'KA');
    const sub = track(harness.redis.duplicate(), async () => { await sub.quit(); });
    const w = { sub, writes: 0 };
    // `expired` is a TTL running out, which no request wrote; the comparison lets it pass too.
    sub.on('pmessage', (_pattern: string, _channel: string, event: string) => { if (event !== 'expired') w.writes++; });
    await sub.psubscribe(`__keyspace@*__:${harness.prefix}:*`);
    watcher = w;
  }

  /** Every event of a write made before now has been counted: Redis answers a PING after the events it sent before. */
  async function counted(): Promise<number> {
    await watcher!.sub.ping();
    return watcher!.writes;
  }

  async function snapshot(): Promise<KeySpace> {
    const writes = watcher ? await counted() : undefined;
    const out = await walk();
    if (writes !== undefined) writesAt.set(out, writes);
    return out;
  }

  async function walk(): Promise<KeySpace> {
    const harness = h();
    const keys = await harness.allKeys();
    const pipe = harness.redis.pipeline();
    for (const k of keys) pipe.dumpBuffer(k).pttl(k);
    const replies = (await pipe.exec()) ?? [];
    const out: KeySpace = new Map();
    const now = Date.now();
    keys.forEach((k, i) => {
      const dump = replies[2 * i][1] as Buffer | null;
      const ttl = Number(replies[2 * i + 1][1]);
      // A key that expired between the SCAN and the DUMP is as absent as one the SCAN missed.
      if (!dump) return;
      out.set(k, createHash('sha1').update(dump).digest('hex'));
      if (ttl >= 0) expiresAt.set(k, now + ttl);
      else expiresAt.delete(k);
    });
    return out;
  }

  /**
   * Redis as `after` found it is Redis as `before` left it: no key added, changed or removed,
   * except keys gone because their own TTL ran out meanwhile (a full rate-limit bucket, a
   * minute's counter), which no request wrote.
   */
  function expectUnchanged(after: KeySpace, before: KeySpace, what: string): void {
    const now = Date.now();
    const expected = [...before.entries()].filter(([k]) => after.has(k) || (expiresAt.get(k) ?? Infinity) > now + 250);
    expect([...after.entries()].sort(), what).toEqual(expected.sort());
  }

  /** `expectUnchanged(await snapshot(), before, what)`, answered by the write count where it can (see above). */
  async function expectUnchangedSince(before: KeySpace, what: string): Promise<void> {
    const writes = writesAt.get(before);
    if (writes !== undefined && ++checks % WALK_EVERY !== 0 && await counted() === writes) return;
    expectUnchanged(await snapshot(), before, what);
  }

  return { snapshot, expectUnchanged, expectUnchangedSince, watchWrites };
}
