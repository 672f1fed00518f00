import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { startWorker } from '../src/worker/worker.ts';
import { meterRedis } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

/**
 * Redis commands per token of a chat answer read through the AI SDK's chat route (POST …/chat,
 * the UI message stream) next to the same run read over Baton's own SSE (POST …/runs, then GET
 * …/runs/{runId}/events from the start while it streams). Each way runs CHAT_RUNS runs of the
 * echo agent, one after another, TOKENS tokens each, 2 ms apart (a model's pace, so the reader
 * follows live rather than replaying a finished log), and counts every command Redis executed
 * meanwhile (INFO commandstats: the run's own writes, its submit and its readers'). The chat
 * route should cost no more: it is the same follower with another encoder. Counts, not time.
 */
const CHAT_RUNS = Number(process.env.BENCH_CHAT_RUNS ?? 10);
const TOKENS = 300;

export interface ChatStreamBench { runs: number; tokens: number; sse: number; chat: number }

export async function benchChatStream(redisUrl: string): Promise<ChatStreamBench> {
  const prefix = `bchat${randomBytes(4).toString('hex')}`;
  const env = { REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench-chat', PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0', SUBMIT_RATE_PER_SEC: '0' };
  const config = loadConfig(env);
  const log = createLogger('warn');
  const api = await startApi({ config, redisUrl, log });
  const agents = new Map(builtinAgents(config).map((a) => [a.name, a]));
  const worker = await startWorker({ config, redisUrl, log, agents, opsServer: false });
  const redis = new Redis(redisUrl);
  try {
    const key = (await new ApiKeyStore(redis, createKeys(prefix)).create('bench', 'client')).key;
    const base = `${api.url}/v1/scopes/bench`;
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const content = Array.from({ length: TOKENS }, (_, i) => `t${i}`).join(' ');
    const body = { runtime: 'bench-chat', agent: 'echo', metadata: { delayMs: 2 } };
    const overSse = async (i: number) => {
      const res = await fetch(`${base}/runs`, { method: 'POST', headers, body: JSON.stringify({ ...body, sessionId: `sse-${i}`, input: { content } }) });
      const run = (await res.json()) as { id: string };
      await readAll(await fetch(`${base}/runs/${run.id}/events`, { headers: { authorization: headers.authorization } }), 'event: end');
    };
    const overChat = async (i: number) => {
      const messages = [{ id: 'u', role: 'user', parts: [{ type: 'text', text: content }] }];
      const res = await fetch(`${base}/chat`, { method: 'POST', headers, body: JSON.stringify({ ...body, id: `chat-${i}`, messages, trigger: 'submit-message' }) });
      await readAll(res, '"type":"finish"');
    };
    // Once each unmeasured: the first run of a process pays for its connections and compiles.
    await overSse(-1);
    await overChat(-1);
    const measure = async (one: (i: number) => Promise<void>) => {
      const stop = await meterRedis(redis);
      for (let i = 0; i < CHAT_RUNS; i++) await one(i);
      return (await stop()).commands / (CHAT_RUNS * TOKENS);
    };
    const sse = await measure(overSse);
    const chat = await measure(overChat);
    return { runs: CHAT_RUNS, tokens: TOKENS, sse, chat };
  } finally {
    redis.disconnect();
    await worker.close();
    await api.close();
  }
}

/** Reads an answer to its end; it must contain `last` (the run ended as a reader sees it). */
async function readAll(res: Response, last: string): Promise<void> {
  const text = await res.text();
  if (!res.ok || !text.includes(last)) throw new Error(`${res.status}: the answer did not end with ${last}: ${text.slice(-300)}`);
}

export function printChatStream(b: ChatStreamBench): void {
  printTable(`Redis commands per token, ${b.runs} runs of ${b.tokens} tokens, read live`, {
    "Baton's SSE (submit, GET …/events)": { 'commands/token': num(b.sse, 3), ratio: '1.00×' },
    'AI SDK chat route (POST …/chat)': { 'commands/token': num(b.chat, 3), ratio: ratio(b.chat, b.sse) },
  });
}
