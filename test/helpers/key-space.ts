import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import type { Harness } from './harness.ts';

/** A file's key space at one moment: each key with a digest of its DUMP. */
export type KeySpace = Map<string, string>;

/**
 * Snapshots of a file's key space (`h()`'s allKeys, read in one pipeline) and the check that
 * a request changed nothing in it. Each snapshot also notes when its keys with a TTL end by
 * themselves, so the check lets such a key vanish once that time has come.
 */
export function keySpaceOf(h: () => Harness) {
  /** When each key seen by the last snapshot expires by itself (epoch ms; keys with a TTL only). */
  const expiresAt = new Map<string, number>();

  async function snapshot(): Promise<KeySpace> {
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

  return { snapshot, expectUnchanged };
}
