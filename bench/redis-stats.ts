import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { startLocalRedis } from '../src/cli/local-redis.ts';

/** Total commands Redis has executed (INFO commandstats), for per-run command counts. */
export async function totalCommands(redis: Redis): Promise<number> {
  const info = await redis.info('commandstats');
  let total = 0;
  for (const m of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) total += Number(m[1]);
  return total;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * Runs `fn` against REDIS_URL when set, else against a redis-server of its own (no
 * persistence, a temp folder) that is stopped and removed afterwards.
 */
export async function withBenchRedis(fn: (redisUrl: string) => Promise<void>): Promise<void> {
  if (process.env.REDIS_URL) return fn(process.env.REDIS_URL);
  const dir = mkdtempSync(join(tmpdir(), 'baton-bench-'));
  const local = await startLocalRedis(dir, ['--appendonly', 'no']);
  try {
    await fn(local.url);
  } finally {
    await local.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
