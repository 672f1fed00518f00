import type { Redis } from 'ioredis';
import { WAIT_KINDS, type WaitKind } from '../contract/runs.ts';
import type { Keys } from '../keys.ts';

/** Scopes read per pipeline: one round trip per 500 scopes keeps a scrape short with many tenants. */
const BATCH = 500;

/**
 * How many runs of `runtime` wait, by kind of wait, summed over every scope: the scripts keep
 * `wait:<kind>` in each scope's `stats:<runtime>` hash (see setStatus in transitions/lib/status.lua), so this is
 * one HMGET per scope, pipelined. Read when Prometheus scrapes, like the queue gauges.
 */
export async function waitingRuns(redis: Redis, keys: Keys, runtime: string): Promise<Record<WaitKind, number>> {
  const counts = Object.fromEntries(WAIT_KINDS.map((k) => [k, 0])) as Record<WaitKind, number>;
  const fields = WAIT_KINDS.map((k) => `wait:${k}`);
  let cursor = '0';
  do {
    const [next, scopes] = await redis.sscan(keys.scopes, cursor, 'COUNT', BATCH);
    cursor = next;
    if (scopes.length === 0) continue;
    const pipe = redis.pipeline();
    for (const scope of scopes) pipe.hmget(keys.scope(scope).stats(runtime), ...fields);
    for (const [err, row] of (await pipe.exec()) ?? []) {
      if (err) throw err;
      (row as (string | null)[]).forEach((v, i) => { counts[WAIT_KINDS[i]] += Math.max(0, Number(v ?? 0)); });
    }
  } while (cursor !== '0');
  return counts;
}
