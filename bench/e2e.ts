import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { submitDoor } from '../test/helpers/submit.ts';
import { runtimeCounts } from '../src/lib/tenancy/runtime-counts.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { startWorker } from '../src/worker/worker.ts';
import { spawnBaton, type BenchProcess } from './processes.ts';
import { meterRedis } from './redis-stats.ts';

export interface Throughput {
  runs: number;
  seconds: number;
  runsPerSec: number;
  commandsPerRun: number;
  /** Redis CPU time per run (INFO cpu), µs; undefined when the server does not report it. */
  cpuUsPerRun: number | undefined;
}

/**
 * Each throughput row first puts `warmup` runs through, unmeasured: a new process compiles
 * its hot paths on its first few hundred runs, which would be charged to whichever row
 * comes first.
 */
export interface RowOptions { runs: number; warmup: number; concurrency: number }

/** Raw BullMQ: add N jobs one by one (as an API would) to a queue, a no-op worker completes them. */
export async function benchRawBullmq(redisUrl: string, o: RowOptions): Promise<Throughput> {
  const conn = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const admin = new Redis(redisUrl);
  const name = `raw-${randomBytes(4).toString('hex')}`;
  const queue = new Queue(name, { connection: conn, prefix: 'bench' });
  let done = 0;
  const worker = new Worker(name, async () => undefined, { connection: conn, prefix: 'bench', concurrency: o.concurrency });
  worker.on('completed', () => { done++; });
  await worker.waitUntilReady();
  try {
    return await measure(admin, o, () => done, (i) => queue.add('run', { i }, { removeOnComplete: true }).then(() => undefined));
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await Promise.all([conn.quit(), admin.quit()]);
  }
}

function benchEnv(redisUrl: string, concurrency: number): Record<string, string> {
  return {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: `bench${randomBytes(4).toString('hex')}`, RUNTIME: 'bench', PORT: '0',
    LOG_LEVEL: 'warn', WORKER_CONCURRENCY: String(concurrency), MAX_ACTIVE_PER_SCOPE: '100000', METRICS_PORT: '0',
    SUBMIT_RATE_PER_SEC: '0',
  };
}

/** Runs of the bench scope that succeeded so far (the runtime's stats hash). */
function succeeded(admin: Redis, prefix: string) {
  const statsKey = createKeys(prefix).scope('bench').stats('bench');
  return async () => runtimeCounts(await admin.hgetall(statsKey)).succeeded;
}

/**
 * Baton in this process: one API and one worker on their own connections, echo agent (no
 * delay), the finish commits the turn to the session history. `viaHttp: false` submits
 * through the submit door (Submissions: the engine without the HTTP layer); else HTTP POSTs, 50 in flight.
 */
export async function benchBaton(
  redisUrl: string,
  o: RowOptions & {
    viaHttp: boolean;
    /** Settings over the bench's own (e.g. REDIS_MIN_REPLICAS_ACK). */
    env?: Record<string, string>;
    /** Collects each measured submit's time to its answer, ms. */
    latencies?: number[];
  },
): Promise<Throughput> {
  const env = { ...benchEnv(redisUrl, o.concurrency), ...o.env };
  const prefix = env.BATON_KEY_PREFIX;
  const config = loadConfig(env);
  const log = createLogger('warn');
  const admin = new Redis(redisUrl);
  const api = await startApi({ config, redisUrl, log });
  const worker = await startWorker({ config, redisUrl, log, agents: new Map(builtinAgents(config).map((a) => [a.name, a])) });
  const conn = createRedis({ url: redisUrl, name: 'bench-store', blocking: true });
  const dispatcher = new Dispatcher(conn, createKeys(prefix));
  try {
    let submit: (i: number) => Promise<void>;
    let closeSubmitter = () => {};
    if (o.viaHttp) {
      const post = await poster(admin, prefix, api.url);
      submit = post.submit;
      closeSubmitter = post.close;
    } else {
      const door = submitDoor(conn, createKeys(prefix), config, gateways(conn, createKeys(prefix), config, dispatcher).api);
      submit = async (i) => {
        await door.submit({ scope: 'bench', sessionId: `s${i}`, input: { content: 'hello baton bench' }, runtime: 'bench', agent: 'echo' });
      };
    }
    const done = succeeded(admin, prefix);
    const timed = o.latencies && ((i: number) => {
      const t0 = performance.now();
      return submit(i).then(() => { o.latencies!.push(performance.now() - t0); });
    });
    const t = await measure(admin, o, done, timed ?? submit);
    closeSubmitter();
    return t;
  } finally {
    await worker.close();
    await api.close();
    await dispatcher.close();
    await Promise.all([conn.quit(), admin.quit()]);
  }
}

/**
 * Baton as deployed: a `baton api` process and `baton worker` processes, HTTP submits from
 * this process (50 in flight). Workers are added between rows, so the scale-out rows share
 * one API process (warmed by the rows before) and each row warms its new workers.
 */
export async function httpFleet(redisUrl: string, concurrency: number) {
  const env = benchEnv(redisUrl, concurrency);
  const prefix = env.BATON_KEY_PREFIX;
  const admin = new Redis(redisUrl);
  const processes: BenchProcess[] = [];
  const workers: BenchProcess[] = [];
  try {
    const api = await spawnBaton('api', env);
    processes.push(api);
    const post = await poster(admin, prefix, api.url!);
    const done = succeeded(admin, prefix);
    return {
      async scaleTo(n: number): Promise<void> {
        const started = await Promise.all(Array.from({ length: n - workers.length }, () => spawnBaton('worker', env)));
        workers.push(...started);
        processes.push(...started);
      },
      measure: (o: RowOptions) => measure(admin, o, done, post.submit),
      async close(): Promise<void> {
        post.close();
        await Promise.all(processes.map((p) => p.kill()));
        await admin.quit();
      },
    };
  } catch (err) {
    await Promise.all(processes.map((p) => p.kill()));
    await admin.quit();
    throw err;
  }
}

/** Every run starts a session of its own, also across the rows of one fleet (a session runs one run at a time). */
let sessionSeq = 0;

/** Submits `runs` runs (after `warmup` unmeasured ones) and waits until `done()` counted them all. */
async function measure(
  admin: Redis, o: RowOptions, done: () => number | Promise<number>, submit: (i: number) => Promise<void>,
): Promise<Throughput> {
  const waitFor = async (target: number) => {
    while ((await done()) < target) await new Promise((r) => setTimeout(r, 5));
  };
  const start = await done();
  await inParallel(o.warmup, 50, () => submit(sessionSeq++));
  await waitFor(start + o.warmup);
  const stop = await meterRedis(admin);
  const t0 = performance.now();
  await inParallel(o.runs, 50, () => submit(sessionSeq++));
  await waitFor(start + o.warmup + o.runs);
  const seconds = (performance.now() - t0) / 1000;
  const work = await stop();
  return {
    runs: o.runs, seconds, runsPerSec: o.runs / seconds, commandsPerRun: work.commands / o.runs,
    cpuUsPerRun: work.cpuSeconds === undefined ? undefined : (work.cpuSeconds * 1e6) / o.runs,
  };
}

/** HTTP submits of the echo agent with a client key of the bench scope. */
async function poster(admin: Redis, prefix: string, apiUrl: string) {
  const key = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
  const post = httpPoster(`${apiUrl}/v1/scopes/bench/runs`, { authorization: `Bearer ${key}` });
  return {
    async submit(i: number): Promise<void> {
      const { status, body } = await post({ sessionId: `s${i}`, input: { content: 'hello baton bench' }, runtime: 'bench' });
      if (status !== 202) throw new Error(`submit answered ${status}: ${body}`);
    },
    close: () => post.close(),
  };
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
