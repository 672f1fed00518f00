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

/** Calls and microseconds by command (INFO commandstats; a function's inner commands counted under their own names too). */
export async function commandStats(redis: Redis): Promise<Map<string, { calls: number; usec: number }>> {
  const info = await redis.info('commandstats');
  const out = new Map<string, { calls: number; usec: number }>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) out.set(m[1], { calls: Number(m[2]), usec: Number(m[3]) });
  return out;
}

/**
 * CPU seconds the redis-server process has used (INFO cpu: used_cpu_sys + used_cpu_user,
 * getrusage of the whole process, so its background threads count too). Undefined when the
 * server does not report them (some managed services hide INFO cpu).
 */
export async function redisCpuSeconds(redis: Redis): Promise<number | undefined> {
  const info = await redis.info('cpu');
  const sys = /^used_cpu_sys:([\d.]+)/m.exec(info);
  const user = /^used_cpu_user:([\d.]+)/m.exec(info);
  return sys && user ? Number(sys[1]) + Number(user[1]) : undefined;
}

/** What Redis did between start and stop: commands executed and CPU time spent. */
export interface RedisWork {
  commands: number;
  cpuSeconds: number | undefined;
  /** Per command: calls and microseconds inside the window (the meter's own INFO calls included). */
  byCommand: Map<string, { calls: number; usec: number }>;
}

/**
 * Starts measuring Redis's work; the returned function ends it. Both figures are
 * server-wide, so they are a run's cost only on a Redis nothing else uses: the bench's
 * own redis-server (REDIS_URL unset).
 */
export async function meterRedis(redis: Redis): Promise<() => Promise<RedisWork>> {
  // The CPU readings enclose the command counts, so the only meter command counted is the
  // first INFO commandstats (a command is counted once it has run).
  const cpu0 = await redisCpuSeconds(redis);
  const stats0 = await commandStats(redis);
  return async () => {
    const stats1 = await commandStats(redis);
    const cpu1 = await redisCpuSeconds(redis);
    const byCommand = new Map<string, { calls: number; usec: number }>();
    for (const [name, b] of stats1) {
      const a = stats0.get(name) ?? { calls: 0, usec: 0 };
      if (b.calls > a.calls) byCommand.set(name, { calls: b.calls - a.calls, usec: b.usec - a.usec });
    }
    const count = (m: Map<string, { calls: number }>) => [...m.values()].reduce((n, c) => n + c.calls, 0);
    return {
      byCommand,
      commands: count(stats1) - count(stats0) - 1,
      cpuSeconds: cpu0 === undefined || cpu1 === undefined ? undefined : cpu1 - cpu0,
    };
  };
}

/** Why CPU figures may include work that is not the bench's (printed under the tables). */
export const sharedRedisNote = process.env.REDIS_URL
  ? 'REDIS_URL is set: commands and CPU are server-wide, so they include whatever else uses that Redis'
  : undefined;

/** Deletes a bench's keys (its random prefix), so a shared Redis is left as it was found. */
export async function deleteByPrefix(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    if (batch.length) await redis.del(...batch);
  } while (cursor !== '0');
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** The p-th percentile of unsorted samples. */
export function percentileOf(samples: number[], p: number): number {
  return percentile([...samples].sort((a, b) => a - b), p);
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
