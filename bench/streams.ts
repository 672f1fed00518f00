import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { defineAgent, type Agent } from '../src/lib/sdk/agent.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { loadConfig } from '../src/lib/config.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { startWorker } from '../src/worker/worker.ts';
import { percentile, withBenchRedis } from './redis-stats.ts';

/**
 * Streams, end to end, next to raw Redis pub/sub measured in the same run:
 * - latency: 100 runs stream at once, each emitting a token every 10 ms; every token carries
 *   its emit time and the reader (Baton's typed client over SSE) notes when it arrives.
 *   Raw: 100 publishers PUBLISH a timestamp every 10 ms, one subscriber notes arrival.
 * - throughput: one run emits tokens as fast as it can; tokens/s as the reader receives them.
 *   Raw: one publisher PUBLISHes as fast as ioredis pipelines, one subscriber counts.
 * Baton adds what raw pub/sub lacks (a persisted, resumable log, fencing, HTTP/SSE), and
 * coalesces tokens for EMIT_FLUSH_MS, which is most of its added latency by design.
 */

/** BENCH_STREAM_RUNS: concurrent streaming runs for the latency figure (default 100). */
const RUNS = Number(process.env.BENCH_STREAM_RUNS ?? 100);
const TOKENS_PER_RUN = 100;
const INTERVAL_MS = 10;
const FAST_TOKENS = 20_000;

export interface StreamSide { p50Ms: number; p99Ms: number; tokensPerSec: number }
export interface StreamBench {
  runs: number;
  tokensPerRun: number;
  fastTokens: number;
  flushMs: number;
  baton: StreamSide & { tokensPerEvent: number };
  raw: StreamSide;
}

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Emits timestamped tokens on a schedule (`latency`), or plain tokens flat out (`fast`). */
const streamer: Agent = defineAgent({
  name: 'bench-streamer',
  async run(ctx) {
    const mode = String(ctx.metadata.mode);
    if (mode === 'fast') {
      for (let i = 0; i < FAST_TOKENS; i++) {
        ctx.emit('tok ');
        if (i % 100 === 99) await new Promise((r) => setImmediate(r));
      }
      return 'done';
    }
    const start = now();
    for (let i = 0; i < TOKENS_PER_RUN; i++) {
      // Keep the schedule (not drift): token i is due at start + i * interval.
      const due = start + i * INTERVAL_MS;
      if (due > now()) await sleep(due - now());
      ctx.emit(`${now().toFixed(3)}|`);
    }
    return 'done';
  },
});

export async function benchStreams(redisUrl: string): Promise<StreamBench> {
  const prefix = `bstream${randomBytes(4).toString('hex')}`;
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0',
    WORKER_CONCURRENCY: String(RUNS), MAX_ACTIVE_PER_SCOPE: String(RUNS * 2),
    // Every run's reader streams on one key at once: past the default per-key stream cap.
    SSE_MAX_PER_KEY: String(RUNS * 2), SSE_MAX_PER_SCOPE: String(RUNS * 2),
  };
  const config = loadConfig(env);
  const log = createLogger('warn');
  const admin = new Redis(redisUrl);
  const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
  const api = await startApi({ config, redisUrl, log });
  const worker = await startWorker({ config, redisUrl, log, agents: new Map([[streamer.name, streamer]]), opsServer: false });
  const client = new BatonClient({ url: api.url, apiKey, scope: 'bench' });
  try {
    const latency = await batonLatency(client);
    const fast = await batonThroughput(client);
    const raw = await rawPubSub(redisUrl);
    return {
      runs: RUNS, tokensPerRun: TOKENS_PER_RUN, fastTokens: FAST_TOKENS, flushMs: config.EMIT_FLUSH_MS,
      baton: { ...latency, ...fast },
      raw,
    };
  } finally {
    await worker.close();
    await api.close();
    await admin.quit();
  }
}

async function batonLatency(client: BatonClient): Promise<{ p50Ms: number; p99Ms: number }> {
  const latencies: number[] = [];
  await Promise.all(Array.from({ length: RUNS }, async (_, i) => {
    const run = await client.submit({ sessionId: `lat-${i}`, input: { content: 'x' }, runtime: 'bench', agent: streamer.name, metadata: { mode: 'latency' } });
    for await (const e of client.stream(run.id)) {
      if (e.type !== 'token') continue;
      const at = now();
      for (const stamp of e.data.text.split('|')) if (stamp) latencies.push(at - Number(stamp));
    }
  }));
  if (latencies.length !== RUNS * TOKENS_PER_RUN) throw new Error(`expected ${RUNS * TOKENS_PER_RUN} tokens, got ${latencies.length}`);
  latencies.sort((a, b) => a - b);
  return { p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99) };
}

async function batonThroughput(client: BatonClient): Promise<{ tokensPerSec: number; tokensPerEvent: number }> {
  const run = await client.submit({ sessionId: 'fast', input: { content: 'x' }, runtime: 'bench', agent: streamer.name, metadata: { mode: 'fast' } });
  let first = 0;
  let last = 0;
  let chars = 0;
  let events = 0;
  for await (const e of client.stream(run.id)) {
    if (e.type !== 'token') continue;
    last = now();
    if (!first) first = last;
    chars += e.data.text.length;
    events++;
  }
  const tokens = chars / 4;
  if (tokens !== FAST_TOKENS) throw new Error(`expected ${FAST_TOKENS} tokens, got ${tokens}`);
  return { tokensPerSec: tokens / ((last - first) / 1000 || 1e-3), tokensPerEvent: tokens / events };
}

/** The same two measurements over bare PUBLISH/SUBSCRIBE: no log, no resume, no coalescing. */
async function rawPubSub(redisUrl: string): Promise<StreamSide> {
  const tag = randomBytes(4).toString('hex');
  const sub = new Redis(redisUrl);
  const pub = new Redis(redisUrl);
  try {
    const latencies: number[] = [];
    let fastCount = 0;
    let fastFirst = 0;
    let fastLast = 0;
    let fastDone!: () => void;
    const fastAll = new Promise<void>((r) => { fastDone = r; });
    sub.on('message', (channel: string, message: string) => {
      const at = now();
      if (channel === `raw-${tag}-fast`) {
        if (!fastFirst) fastFirst = at;
        fastLast = at;
        if (++fastCount === FAST_TOKENS) fastDone();
        return;
      }
      latencies.push(at - Number(message));
    });
    const channels = Array.from({ length: RUNS }, (_, i) => `raw-${tag}-${i}`);
    await sub.subscribe(...channels, `raw-${tag}-fast`);

    await Promise.all(channels.map(async (ch) => {
      const start = now();
      for (let i = 0; i < TOKENS_PER_RUN; i++) {
        const due = start + i * INTERVAL_MS;
        if (due > now()) await sleep(due - now());
        void pub.publish(ch, now().toFixed(3));
      }
    }));
    const until = Date.now() + 10_000;
    while (latencies.length < RUNS * TOKENS_PER_RUN && Date.now() < until) await sleep(5);
    if (latencies.length !== RUNS * TOKENS_PER_RUN) throw new Error(`raw pub/sub delivered ${latencies.length} of ${RUNS * TOKENS_PER_RUN}`);
    latencies.sort((a, b) => a - b);

    for (let i = 0; i < FAST_TOKENS; i++) {
      void pub.publish(`raw-${tag}-fast`, 'tok ');
      if (i % 100 === 99) await new Promise((r) => setImmediate(r));
    }
    await fastAll;
    return {
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      tokensPerSec: FAST_TOKENS / ((fastLast - fastFirst) / 1000 || 1e-3),
    };
  } finally {
    await Promise.all([sub.quit(), pub.quit()]);
  }
}

/** Prints the figures and the Baton / raw ratios. */
export function printStreams(r: StreamBench): void {
  console.log(`\nstreams: ${r.runs} concurrent runs × ${r.tokensPerRun} tokens every ${INTERVAL_MS} ms (latency); one run of ${r.fastTokens} tokens flat out (throughput); EMIT_FLUSH_MS ${r.flushMs}`);
  const row = (s: StreamSide) => ({ 'emit→client p50 ms': +s.p50Ms.toFixed(2), 'p99 ms': +s.p99Ms.toFixed(2), 'tokens/s (one run)': Math.round(s.tokensPerSec) });
  console.table({ 'raw Redis pub/sub': row(r.raw), 'Baton (log + SSE + typed client)': row(r.baton) });
  console.log(
    `Baton / raw pub/sub: latency p50 ${(r.baton.p50Ms / r.raw.p50Ms).toFixed(1)}x, p99 ${(r.baton.p99Ms / r.raw.p99Ms).toFixed(1)}x, ` +
    `throughput ${(r.baton.tokensPerSec / r.raw.tokensPerSec).toFixed(2)}x; Baton coalesced ${r.baton.tokensPerEvent.toFixed(1)} tokens per event in the fast run`,
  );
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}`);
  await withBenchRedis(async (redisUrl) => printStreams(await benchStreams(redisUrl)));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
