import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { startWorker } from '../src/worker/worker.ts';
import { clockMs, streamer } from './bench-agents.ts';
import { deleteByPrefix, meterRedis, percentileOf, sharedRedisNote, withBenchRedis } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

/**
 * A streamed response over the OpenAI-compatible API (POST /v1/responses, stream: true,
 * through the `openai` package) beside the same run over Baton's own SSE (a submit with
 * `Accept: text/event-stream`), measured in turns in this run against the same Redis: the
 * API and the worker in this process, BENCH_OAI_RUNS runs (8: a scope's default maxActive, so none queues) at once per round, each
 * BENCH_OAI_TOKENS tokens (100) one every BENCH_OAI_TOKEN_MS (20), BENCH_OAI_ROUNDS rounds (3)
 * per side, alternating. Printed: time to first token (request sent → first text event
 * read), Redis commands and Redis CPU per token (INFO deltas ÷ tokens), and the ratios.
 * The OpenAI side reads the same log the same way; what it adds is its encoding in the API.
 *   BENCH_ONLY=openai-streams npm run bench (or node --import tsx bench/openai-streams.ts)
 */
const RUNS = Number(process.env.BENCH_OAI_RUNS ?? 8);
const TOKENS = Number(process.env.BENCH_OAI_TOKENS ?? 100);
const TOKEN_MS = Number(process.env.BENCH_OAI_TOKEN_MS ?? 20);
const ROUNDS = Number(process.env.BENCH_OAI_ROUNDS ?? 3);

interface Side { ttftMs: number[]; commands: number; cpuSeconds: number; tokens: number }

/** One run over Baton's SSE: ms to the first `token` event. */
async function batonRun(url: string, key: string, runtime: string): Promise<number> {
  const start = clockMs();
  const res = await fetch(`${url}/v1/scopes/bench/runs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({
      sessionId: `s-${randomBytes(6).toString('hex')}`, input: { content: 'go' }, runtime, agent: 'bench-streamer',
      metadata: { tokens: TOKENS, intervalMs: TOKEN_MS },
    }),
  });
  let first = NaN;
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) {
    const text = decoder.decode(chunk as Uint8Array, { stream: true });
    if (Number.isNaN(first) && text.includes('event: token')) first = clockMs() - start;
  }
  return first;
}

/** One run over the OpenAI-compatible API: ms to the first response.output_text.delta. */
async function openAiRun(client: OpenAI): Promise<number> {
  const start = clockMs();
  const stream = await client.responses.create({
    model: 'bench-streamer', input: 'go', stream: true, metadata: { tokens: String(TOKENS), intervalMs: String(TOKEN_MS) },
  });
  let first = NaN;
  for await (const e of stream) if (Number.isNaN(first) && e.type === 'response.output_text.delta') first = clockMs() - start;
  return first;
}

async function measure(redis: Redis, side: Side, one: () => Promise<number>): Promise<void> {
  const stop = await meterRedis(redis);
  const ttft = await Promise.all(Array.from({ length: RUNS }, one));
  const work = await stop();
  side.ttftMs.push(...ttft);
  side.commands += work.commands;
  side.cpuSeconds += work.cpuSeconds ?? NaN;
  side.tokens += RUNS * TOKENS;
}

export async function benchOpenAiStreams(redisUrl: string): Promise<{ baton: Side; openai: Side }> {
  const prefix = `boai${randomBytes(3).toString('hex')}`;
  const runtime = `rt-${prefix}`;
  const config = loadConfig({ REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: runtime, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'silent' });
  const log = createLogger('silent');
  const api = await startApi({ config, redisUrl, log });
  const worker = await startWorker({ config, redisUrl, log, agents: new Map([[streamer.name, streamer]]) });
  const redis = new Redis(redisUrl);
  try {
    const key = (await new ApiKeyStore(redis, createKeys(prefix)).create('bench', 'client')).key;
    const client = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: key, maxRetries: 0 });
    const baton: Side = { ttftMs: [], commands: 0, cpuSeconds: 0, tokens: 0 };
    const openai: Side = { ttftMs: [], commands: 0, cpuSeconds: 0, tokens: 0 };
    // A round of each, unmeasured, to warm the processes up.
    await measure(redis, { ttftMs: [], commands: 0, cpuSeconds: 0, tokens: 0 }, () => batonRun(api.url, key, runtime));
    await measure(redis, { ttftMs: [], commands: 0, cpuSeconds: 0, tokens: 0 }, () => openAiRun(client));
    for (let round = 0; round < ROUNDS; round++) {
      await measure(redis, baton, () => batonRun(api.url, key, runtime));
      await measure(redis, openai, () => openAiRun(client));
    }
    return { baton, openai };
  } finally {
    await worker.close();
    await api.close();
    await deleteByPrefix(redis, prefix);
    redis.disconnect();
  }
}

export function printOpenAiStreams(r: { baton: Side; openai: Side }): void {
  const row = (s: Side) => ({
    'TTFT p50 ms': num(percentileOf(s.ttftMs, 50)), 'TTFT p99 ms': num(percentileOf(s.ttftMs, 99)),
    'Redis cmds/token': num(s.commands / s.tokens, 2), 'Redis CPU µs/token': num((s.cpuSeconds / s.tokens) * 1e6, 2),
  });
  printTable(`${RUNS} streams at once, ${TOKENS} tokens each, ${ROUNDS} rounds`, {
    "Baton's SSE": row(r.baton),
    'OpenAI Responses stream': row(r.openai),
    'ratio (OpenAI ÷ Baton)': {
      'TTFT p50 ms': ratio(percentileOf(r.openai.ttftMs, 50), percentileOf(r.baton.ttftMs, 50)),
      'TTFT p99 ms': ratio(percentileOf(r.openai.ttftMs, 99), percentileOf(r.baton.ttftMs, 99)),
      'Redis cmds/token': ratio(r.openai.commands / r.openai.tokens, r.baton.commands / r.baton.tokens),
      'Redis CPU µs/token': ratio(r.openai.cpuSeconds / r.openai.tokens, r.baton.cpuSeconds / r.baton.tokens),
    },
  });
  if (sharedRedisNote) console.log(sharedRedisNote);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await withBenchRedis(async (url) => printOpenAiStreams(await benchOpenAiStreams(url)));
}
