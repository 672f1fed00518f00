import { randomBytes } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { ApiKeyStore } from '../src/lib/api-keys.ts';
import { loadConfig } from '../src/lib/config.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { BUILTIN_AGENTS } from '../src/worker/agents-loader.ts';
import { startWorker } from '../src/worker/worker.ts';
import { totalCommands } from './redis-stats.ts';

export interface Throughput { runs: number; seconds: number; runsPerSec: number; commandsPerRun: number }

/** Raw BullMQ: add N jobs one by one (as an API would) to a queue, a no-op worker completes them. */
export async function benchRawBullmq(redisUrl: string, n: number, concurrency: number): Promise<Throughput> {
  const conn = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const admin = new Redis(redisUrl);
  const name = `raw-${randomBytes(4).toString('hex')}`;
  const queue = new Queue(name, { connection: conn, prefix: 'bench' });
  let done = 0;
  let resolveAll!: () => void;
  const all = new Promise<void>((r) => { resolveAll = r; });
  const worker = new Worker(name, async () => undefined, { connection: conn, prefix: 'bench', concurrency });
  worker.on('completed', () => { if (++done === n) resolveAll(); });
  await worker.waitUntilReady();
  const before = await totalCommands(admin);
  const t0 = performance.now();
  await inParallel(n, 50, (i) => queue.add('run', { i }, { removeOnComplete: true }).then(() => undefined));
  await all;
  const seconds = (performance.now() - t0) / 1000;
  const commands = (await totalCommands(admin)) - before;
  await worker.close();
  await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  await Promise.all([conn.quit(), admin.quit()]);
  return { runs: n, seconds, runsPerSec: n / seconds, commandsPerRun: commands / n };
}

/**
 * Baton end to end: HTTP submit (50 in flight) → dispatch → claim → echo agent (no delay)
 * → finish with history commit → terminal status, with `workers` worker instances.
 */
export async function benchBaton(
  redisUrl: string, n: number, concurrency: number, opts: { workers?: number; spawnWorkers?: (env: Record<string, string>) => Promise<() => Promise<void>> } = {},
): Promise<Throughput> {
  const prefix = `bench${randomBytes(4).toString('hex')}`;
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', LOG_LEVEL: 'warn',
    WORKER_CONCURRENCY: String(concurrency), MAX_ACTIVE_PER_SCOPE: '100000', METRICS_PORT: '0', SUBMIT_RATE_PER_SEC: '0',
  };
  const config = loadConfig(env);
  const log = createLogger('warn');
  const admin = new Redis(redisUrl);
  const key = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
  const api = await startApi({ config, redisUrl, log });
  const stops: (() => Promise<void>)[] = [];
  const workers = opts.workers ?? 1;
  for (let i = 0; i < workers; i++) {
    if (opts.spawnWorkers) stops.push(await opts.spawnWorkers(env));
    else {
      const w = await startWorker({ config, redisUrl, log, agents: new Map(BUILTIN_AGENTS.map((a) => [a.name, a])) });
      stops.push(() => w.close());
    }
  }
  const statsKey = createKeys(prefix).scope('bench').stats('bench');
  const before = await totalCommands(admin);
  const t0 = performance.now();
  await inParallel(n, 50, async (i) => {
    const res = await fetch(`${api.url}/v1/scopes/bench/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ sessionId: `s${i}`, input: { content: 'hello baton bench' }, runtime: 'bench' }),
    });
    if (res.status !== 202) throw new Error(`submit answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  });
  for (;;) {
    const done = Number((await admin.hget(statsKey, 'succeeded')) ?? 0);
    if (done >= n) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const seconds = (performance.now() - t0) / 1000;
  const commands = (await totalCommands(admin)) - before;
  for (const stop of stops) await stop();
  await api.close();
  await admin.quit();
  return { runs: n, seconds, runsPerSec: n / seconds, commandsPerRun: commands / n };
}

async function inParallel(n: number, width: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(width, n) }, async () => {
    while (next < n) await fn(next++);
  }));
}
