import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { startWorker } from '../src/worker/worker.ts';
import { streamer, clockMs } from './bench-agents.ts';
import { spawnBaton, spawnScript } from './processes.ts';
import { percentile, withBenchRedis } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

/**
 * Streams, end to end, next to raw Redis pub/sub measured in the same run:
 * - latency: STREAM_RUNS runs stream at once (after the same load once, unmeasured, to warm
 *   the processes up), each emitting a token every 10 ms once its reader is connected;
 *   every token carries its emit time and the reader (Baton's typed client over SSE) notes
 *   when it arrives. Raw: STREAM_RUNS publishers PUBLISH a timestamp
 *   every 10 ms, one subscriber notes arrival.
 *   Two layouts: everything in this process (API, worker, readers), and readers apart: the
 *   API and the worker are `baton api` / `baton worker` processes and the readers are this
 *   process (raw: the publisher is a process of its own, bench/raw-publisher.ts). Emit and
 *   arrival times are then taken in different processes, from the machine's monotonic clock
 *   (clockMs in bench-agents.ts), one clock for all of them.
 * - a lone run: the same with one run, readers apart: what one user sees when nothing else streams.
 * - throughput (one process): one run emits tokens as fast as it can; tokens/s as the
 *   reader receives them, from its first token event to its last. Raw: one publisher PUBLISHes as fast as ioredis pipelines.
 * Baton adds what raw pub/sub lacks (a persisted, resumable log, fencing, HTTP/SSE), and
 * coalesces tokens for EMIT_FLUSH_MS, which is most of its added latency by design.
 */

/** BENCH_STREAM_RUNS: concurrent streaming runs for the latency figures (default 100). */
export const STREAM_RUNS = Number(process.env.BENCH_STREAM_RUNS ?? 100);
const TOKENS_PER_RUN = 100;
const INTERVAL_MS = 10;
const FAST_TOKENS = 20_000;
/**
 * Streaming runs wait this long before their first token, so every reader is connected
 * when tokens flow: raw subscribers are subscribed before anything is published, and the
 * figure is the streaming path's, not that of a burst of connects (the time-to-first-token
 * rows measure that).
 */
const START_DELAY_MS = 1000;
const AGENTS = fileURLToPath(new URL('./bench-agents.ts', import.meta.url));

export interface Latency { p50Ms: number; p99Ms: number }
export interface StreamBench {
  runs: number;
  flushMs: number;
  /** API, worker and readers in this process. */
  oneProcess: { baton: Latency & { tokensPerSec: number; tokensPerEvent: number }; raw: Latency & { tokensPerSec: number } };
  /** API and worker processes, readers in this one. */
  apart: { baton: Latency; raw: Latency };
  /** One run alone, readers apart. */
  lone: { baton: Latency; raw: Latency };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function benchEnv(redisUrl: string) {
  return {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: `bstream${randomBytes(4).toString('hex')}`, RUNTIME: 'bench', PORT: '0',
    LOG_LEVEL: 'warn', METRICS_PORT: '0', WORKER_CONCURRENCY: String(STREAM_RUNS), MAX_ACTIVE_PER_SCOPE: String(STREAM_RUNS * 2),
    SUBMIT_RATE_PER_SEC: '0',
    // Every run's reader streams on one key at once: past the default per-key stream cap.
    SSE_MAX_PER_KEY: String(STREAM_RUNS * 2), SSE_MAX_PER_SCOPE: String(STREAM_RUNS * 2),
  };
}

/** A typed client of `scope` with a fresh client key, for an API on `url`. */
export async function clientFor(redisUrl: string, prefix: string, url: string, scope = 'bench'): Promise<BatonClient> {
  const admin = new Redis(redisUrl);
  try {
    const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create(scope, 'client')).key;
    return new BatonClient({ url, apiKey, scope });
  } finally {
    await admin.quit();
  }
}

export async function benchStreams(redisUrl: string): Promise<StreamBench> {
  const oneProcess = await benchOneProcess(redisUrl);
  const apart = await benchApart(redisUrl);
  return { runs: STREAM_RUNS, ...oneProcess, ...apart };
}

async function benchOneProcess(redisUrl: string): Promise<Pick<StreamBench, 'oneProcess' | 'flushMs'>> {
  const env = benchEnv(redisUrl);
  const config = loadConfig(env);
  const log = createLogger('warn');
  const api = await startApi({ config, redisUrl, log });
  const worker = await startWorker({ config, redisUrl, log, agents: new Map([[streamer.name, streamer]]), opsServer: false });
  try {
    const client = await clientFor(redisUrl, env.BATON_KEY_PREFIX, api.url);
    await batonLatency(client, STREAM_RUNS, 'warm');
    const latency = await batonLatency(client, STREAM_RUNS, 'lat');
    const fast = await batonThroughput(client);
    const raw = await rawInProcess(redisUrl);
    return { flushMs: config.EMIT_FLUSH_MS, oneProcess: { baton: { ...latency, ...fast }, raw } };
  } finally {
    await worker.close();
    await api.close();
  }
}

async function benchApart(redisUrl: string): Promise<Pick<StreamBench, 'apart' | 'lone'>> {
  const env = benchEnv(redisUrl);
  const [api, worker] = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env, [AGENTS])]);
  try {
    const client = await clientFor(redisUrl, env.BATON_KEY_PREFIX, api.url!);
    // The same load once, unmeasured: fresh processes run their first ten thousand events in
    // code V8 has not optimized yet (p50 8 to 17 ms after a 5-run warm-up, 2.6 to 4.2 ms after
    // this one), and a deployed API and worker have long been past that.
    await batonLatency(client, STREAM_RUNS, 'warm');
    const baton = await batonLatency(client, STREAM_RUNS, 'apart');
    const loneBaton = await batonLatency(client, 1, 'lone');
    const raw = await rawApart(redisUrl, STREAM_RUNS);
    const loneRaw = await rawApart(redisUrl, 1);
    return { apart: { baton, raw }, lone: { baton: loneBaton, raw: loneRaw } };
  } finally {
    await Promise.all([api.kill(), worker.kill()]);
  }
}

/** `runs` streaming runs at once, read by typed clients in this process. */
async function batonLatency(client: BatonClient, runs: number, tag: string): Promise<Latency> {
  const metadata = { mode: 'latency', tokens: TOKENS_PER_RUN, intervalMs: INTERVAL_MS, startDelayMs: START_DELAY_MS };
  return summarize((await readStreamerRuns(client, { runs, tag, tokens: TOKENS_PER_RUN, metadata: () => metadata })).latencies);
}

export interface StreamerRuns {
  runs: number;
  /** Sessions are `<tag>-<i>`. */
  tag: string;
  /** Tokens each run emits: fewer or more received is an error. */
  tokens: number;
  /** The streamer's metadata for run i (bench-agents.ts). */
  metadata: (i: number) => Record<string, unknown>;
  /** Called when run i's reader sees it running (claimed by a worker). */
  onRunning?: (i: number) => void;
  /** Aborts the readers (a bench that gives up). */
  signal?: AbortSignal;
}

/**
 * Submits `runs` bench-streamer runs at once and reads each with the typed client over SSE
 * (`client`, or run i's client), to its `end`; returns every token's emit → arrival time in
 * ms (arrival stamped here) and how many token events carried them.
 */
export async function readStreamerRuns(
  client: BatonClient | ((i: number) => BatonClient), o: StreamerRuns,
): Promise<{ latencies: number[]; tokenEvents: number }> {
  const latencies: number[] = [];
  let tokenEvents = 0;
  await Promise.all(Array.from({ length: o.runs }, async (_, i) => {
    const c = typeof client === 'function' ? client(i) : client;
    const run = await c.submit({
      sessionId: `${o.tag}-${i}`, input: { content: 'x' }, runtime: 'bench', agent: streamer.name, metadata: o.metadata(i),
    });
    for await (const e of c.stream(run.id, { signal: o.signal })) {
      if (e.type === 'status' && e.data.status === 'running') o.onRunning?.(i);
      if (e.type !== 'token') continue;
      const at = clockMs();
      tokenEvents++;
      for (const stamp of e.data.text.split('|')) if (stamp) latencies.push(at - Number(stamp));
    }
  }));
  if (latencies.length !== o.runs * o.tokens) throw new Error(`expected ${o.runs * o.tokens} tokens, got ${latencies.length}`);
  return { latencies, tokenEvents };
}

async function batonThroughput(client: BatonClient): Promise<{ tokensPerSec: number; tokensPerEvent: number }> {
  const run = await client.submit({
    sessionId: 'fast', input: { content: 'x' }, runtime: 'bench', agent: streamer.name,
    // Streamed live, not replayed: a reader that joined after the run had ended would get
    // every token in one read and seem to receive them in no time at all.
    metadata: { mode: 'fast', tokens: FAST_TOKENS, startDelayMs: START_DELAY_MS },
  });
  let first = 0;
  let last = 0;
  let chars = 0;
  let events = 0;
  for await (const e of client.stream(run.id)) {
    if (e.type !== 'token') continue;
    last = clockMs();
    if (!first) first = last;
    chars += e.data.text.length;
    events++;
  }
  const tokens = chars / 4;
  if (tokens !== FAST_TOKENS) throw new Error(`expected ${FAST_TOKENS} tokens, got ${tokens}`);
  return { tokensPerSec: tokens / ((last - first) / 1000 || 1e-3), tokensPerEvent: tokens / events };
}

export function summarize(latencies: number[]): Latency {
  latencies.sort((a, b) => a - b);
  return { p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99) };
}

/** Subscribes to `channels` and collects emit → arrival latencies of what they carry. */
export async function rawSubscriber(redisUrl: string, channels: string[]) {
  const sub = new Redis(redisUrl);
  const latencies: number[] = [];
  sub.on('message', (_channel: string, message: string) => { latencies.push(clockMs() - Number(message)); });
  await sub.subscribe(...channels);
  return {
    latencies,
    /** Resolves once `expected` messages arrived; fails when they have not within `timeoutMs`. */
    async collect(expected: number, timeoutMs = 10_000): Promise<Latency> {
      const until = Date.now() + timeoutMs;
      while (latencies.length < expected && Date.now() < until) await sleep(5);
      if (latencies.length !== expected) throw new Error(`raw pub/sub delivered ${latencies.length} of ${expected}`);
      return summarize(latencies);
    },
    close: () => sub.quit(),
  };
}

/** The same two measurements over bare PUBLISH/SUBSCRIBE in this process: no log, no resume, no coalescing. */
async function rawInProcess(redisUrl: string): Promise<Latency & { tokensPerSec: number }> {
  const tag = randomBytes(4).toString('hex');
  const channels = Array.from({ length: STREAM_RUNS }, (_, i) => `raw-${tag}-${i}`);
  const sub = await rawSubscriber(redisUrl, channels);
  const fastSub = new Redis(redisUrl);
  const pub = new Redis(redisUrl);
  try {
    await Promise.all(channels.map(async (ch) => {
      const start = clockMs();
      for (let i = 0; i < TOKENS_PER_RUN; i++) {
        const due = start + i * INTERVAL_MS;
        if (due > clockMs()) await sleep(due - clockMs());
        void pub.publish(ch, clockMs().toFixed(3));
      }
    }));
    const latency = await sub.collect(STREAM_RUNS * TOKENS_PER_RUN);

    let fastCount = 0;
    let fastFirst = 0;
    let fastLast = 0;
    let fastDone!: () => void;
    const fastAll = new Promise<void>((r) => { fastDone = r; });
    fastSub.on('message', () => {
      const at = clockMs();
      if (!fastFirst) fastFirst = at;
      fastLast = at;
      if (++fastCount === FAST_TOKENS) fastDone();
    });
    await fastSub.subscribe(`raw-${tag}-fast`);
    for (let i = 0; i < FAST_TOKENS; i++) {
      void pub.publish(`raw-${tag}-fast`, 'tok ');
      if (i % 100 === 99) await new Promise((r) => setImmediate(r));
    }
    await fastAll;
    return { ...latency, tokensPerSec: FAST_TOKENS / ((fastLast - fastFirst) / 1000 || 1e-3) };
  } finally {
    await Promise.all([sub.close(), fastSub.quit(), pub.quit()]);
  }
}

/** Raw pub/sub with the publishers in a process of their own and the subscriber in this one. */
async function rawApart(redisUrl: string, runs: number): Promise<Latency> {
  const tag = randomBytes(4).toString('hex');
  const sub = await rawSubscriber(redisUrl, Array.from({ length: runs }, (_, i) => `raw-${tag}-${i}`));
  try {
    // Subscribed before the publisher starts: pub/sub keeps nothing for late subscribers.
    const publisher = await spawnScript('./raw-publisher.ts', [redisUrl, tag, String(runs), String(TOKENS_PER_RUN), String(INTERVAL_MS)]);
    const latency = await sub.collect(runs * TOKENS_PER_RUN);
    await publisher.kill();
    return latency;
  } finally {
    await sub.close();
  }
}

/** Prints the figures and the Baton / raw ratios. */
export function printStreams(r: StreamBench): void {
  console.log(
    `\nstreams: emit → client latency, ${r.runs} runs at once × ${TOKENS_PER_RUN} tokens every ${INTERVAL_MS} ms, and one run alone; ` +
    `EMIT_FLUSH_MS ${r.flushMs}`,
  );
  const row = (b: Latency, raw: Latency) => ({
    'raw pub/sub p50 / p99 ms': `${num(raw.p50Ms, 2)} / ${num(raw.p99Ms, 2)}`,
    'Baton p50 / p99 ms': `${num(b.p50Ms, 2)} / ${num(b.p99Ms, 2)}`,
    'p50 / p99 ratio': `${ratio(b.p50Ms, raw.p50Ms, 1)} / ${ratio(b.p99Ms, raw.p99Ms, 1)}`,
  });
  printTable('layout', {
    [`${r.runs} runs, all in one process`]: row(r.oneProcess.baton, r.oneProcess.raw),
    [`${r.runs} runs, readers apart from API and worker`]: row(r.apart.baton, r.apart.raw),
    '1 run, readers apart from API and worker': row(r.lone.baton, r.lone.raw),
  });
  const o = r.oneProcess;
  console.log(
    `one run of ${FAST_TOKENS} tokens flat out, one process: raw pub/sub ${Math.round(o.raw.tokensPerSec)} tokens/s, ` +
    `Baton ${Math.round(o.baton.tokensPerSec)} tokens/s (${ratio(o.baton.tokensPerSec, o.raw.tokensPerSec)}; ` +
    `${o.baton.tokensPerEvent.toFixed(1)} tokens coalesced per event)`,
  );
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}`);
  await withBenchRedis(async (redisUrl) => printStreams(await benchStreams(redisUrl)));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
