import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { loadConfig } from '../src/lib/config.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { createRedis } from '../src/lib/redis.ts';
import { Transitions } from '../src/lib/engine/transitions.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
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
  redisUrl: string,
  n: number,
  concurrency: number,
  opts: {
    workers?: number;
    spawnWorkers?: (env: Record<string, string>) => Promise<() => Promise<void>>;
    /** false: submit through RunStore in this process (the engine without the HTTP layer). */
    viaHttp?: boolean;
  } = {},
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
      const w = await startWorker({ config, redisUrl, log, agents: new Map(builtinAgents(config).map((a) => [a.name, a])) });
      stops.push(() => w.close());
    }
  }
  const statsKey = createKeys(prefix).scope('bench').stats('bench');
  const before = await totalCommands(admin);
  const t0 = performance.now();
  if (opts.viaHttp === false) {
    const conn = createRedis({ url: redisUrl, name: 'bench-store', blocking: true });
    const dispatcher = new Dispatcher(conn, createKeys(prefix));
    const store = new RunStore(conn, createKeys(prefix), config, new Transitions(conn, createKeys(prefix), config, dispatcher));
    await inParallel(n, 50, async (i) => {
      await store.submit({ scope: 'bench', sessionId: `s${i}`, input: { content: 'hello baton bench' }, runtime: 'bench', agent: 'echo' });
    });
    await dispatcher.close();
    await conn.quit();
  } else {
    const post = httpPoster(`${api.url}/v1/scopes/bench/runs`, { authorization: `Bearer ${key}` });
    await inParallel(n, 50, async (i) => {
      const { status, body } = await post({ sessionId: `s${i}`, input: { content: 'hello baton bench' }, runtime: 'bench' });
      if (status !== 202) throw new Error(`submit answered ${status}: ${body}`);
    });
    post.close();
  }
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

/**
 * The load generator shares the machine with what it measures, so it uses the cheapest
 * client there is (node:http with keep-alive): fetch costs about half a millisecond of CPU
 * more per request, which would be charged to Baton.
 */
function httpPoster(url: string, headers: Record<string, string>) {
  const u = new URL(url);
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const post = (payload: unknown) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const body = JSON.stringify(payload);
      const req = request(
        {
          host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
          headers: { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c) => { text += c; });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  return Object.assign(post, { close: () => agent.destroy() });
}

async function inParallel(n: number, width: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(width, n) }, async () => {
    while (next < n) await fn(next++);
  }));
}
