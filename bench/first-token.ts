import { randomBytes } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { createKeys } from '../src/lib/keys.ts';
import { spawnBaton, spawnScript } from './processes.ts';
import { percentileOf } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

/**
 * Time to first token: from the moment a client submits to the moment it holds the run's
 * first `token` event, the agent emitting at once (the built-in echo agent). Baton: the typed
 * client's submitAndStream() (one request: the submit's answer is the run's SSE stream) to a
 * `baton api` process, the worker a `baton worker` process; and, printed beside it, submit()
 * then stream() (two requests). Raw, measured in the same run: BullMQ `add` from
 * this process → a bare BullMQ worker in a process of its own PUBLISHes → a subscriber here
 * (subscribed beforehand; pub/sub has no log to read from).
 *
 * - one session: BENCH_TTFT_SAMPLES runs (default 30) one after another in one session;
 * - a burst: BENCH_TTFT_ROUNDS rounds (default 5) of 50 sessions submitting at once.
 */
const SAMPLES = Number(process.env.BENCH_TTFT_SAMPLES ?? 30);
const ROUNDS = Number(process.env.BENCH_TTFT_ROUNDS ?? 5);
export const BURST = 50;
const WARMUP = 5;

export interface FirstTokenSide { oneMs: number; burstMs: number }
export interface FirstTokenBench {
  samples: number; rounds: number; burst: number;
  /** One request (submitAndStream). */
  baton: FirstTokenSide;
  /** Two requests (submit, then stream). */
  batonTwoRequests: FirstTokenSide;
  raw: FirstTokenSide;
}

export async function benchFirstToken(redisUrl: string): Promise<FirstTokenBench> {
  const { baton, batonTwoRequests } = await batonSide(redisUrl);
  const raw = await rawSide(redisUrl);
  return { samples: SAMPLES, rounds: ROUNDS, burst: BURST, baton, batonTwoRequests, raw };
}

/** p50 of `first(session)` run one after another in one session, then in bursts of BURST sessions. */
async function sample(first: (sessionId: string) => Promise<number>, tag: string): Promise<FirstTokenSide> {
  for (let i = 0; i < WARMUP; i++) await first(`${tag}-warm`);
  const one: number[] = [];
  for (let i = 0; i < SAMPLES; i++) one.push(await first(`${tag}-one`));
  const burst: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    burst.push(...await Promise.all(Array.from({ length: BURST }, (_, i) => first(`${tag}-burst-${r}-${i}`))));
  }
  return { oneMs: percentileOf(one, 50), burstMs: percentileOf(burst, 50) };
}

async function batonSide(redisUrl: string): Promise<{ baton: FirstTokenSide; batonTwoRequests: FirstTokenSide }> {
  const prefix = `bttft${randomBytes(4).toString('hex')}`;
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0',
    WORKER_CONCURRENCY: String(BURST), MAX_ACTIVE_PER_SCOPE: String(BURST * 2), SUBMIT_RATE_PER_SEC: '0',
  };
  const [api, worker] = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env)]);
  const admin = new Redis(redisUrl);
  try {
    const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
    const client = new BatonClient({ url: api.url!, apiKey, scope: 'bench' });
    /** When the first token of `events` arrived; read to the end, or the session's next run would queue behind this one. */
    const firstToken = async (runId: string, events: AsyncIterable<{ type: string }>) => {
      let firstAt: number | undefined;
      for await (const e of events) if (e.type === 'token') firstAt ??= performance.now();
      if (firstAt === undefined) throw new Error(`run ${runId} ended without a token`);
      return firstAt;
    };
    // Both ways warm the fresh API and worker processes first, so neither is measured on the
    // other's warm-up (a new process compiles its hot paths over its first runs).
    for (let i = 0; i < 30; i++) {
      const { runId, events } = await client.submitAndStream({ sessionId: 'warm', input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
      await firstToken(runId, events);
      const run = await client.submit({ sessionId: 'warm', input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
      await firstToken(run.id, client.stream(run.id));
    }
    const baton = await sample(async (sessionId) => {
      const t0 = performance.now();
      const { runId, events } = await client.submitAndStream({ sessionId, input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
      return (await firstToken(runId, events)) - t0;
    }, 'baton');
    const batonTwoRequests = await sample(async (sessionId) => {
      const t0 = performance.now();
      const run = await client.submit({ sessionId, input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
      return (await firstToken(run.id, client.stream(run.id))) - t0;
    }, 'baton2');
    return { baton, batonTwoRequests };
  } finally {
    await admin.quit();
    await Promise.all([api.kill(), worker.kill()]);
  }
}

async function rawSide(redisUrl: string): Promise<FirstTokenSide> {
  const tag = randomBytes(4).toString('hex');
  const name = `raw-ttft-${tag}`;
  const worker = await spawnScript('./raw-worker.ts', [redisUrl, name, String(BURST)]);
  const conn = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const sub = new Redis(redisUrl);
  const queue = new Queue(name, { connection: conn, prefix: 'bench' });
  const waiting = new Map<string, () => void>();
  sub.on('pmessage', (_pattern: string, channel: string) => waiting.get(channel)?.());
  await sub.psubscribe(`${name}:*`);
  let seq = 0;
  try {
    return await sample(async () => {
      const channel = `${name}:${seq++}`;
      const t0 = performance.now();
      const arrived = new Promise<number>((resolve) => waiting.set(channel, () => resolve(performance.now())));
      await queue.add('run', { channel }, { removeOnComplete: true });
      const at = await arrived;
      waiting.delete(channel);
      return at - t0;
    }, 'raw');
  } finally {
    await worker.stop();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await Promise.all([conn.quit(), sub.quit()]);
  }
}

export function printFirstToken(r: FirstTokenBench): void {
  console.log(
    `\ntime to first token: submit → first token at the reader, p50 of ${r.samples} runs in one session and of ` +
    `${r.rounds} bursts of ${r.burst} sessions at once; raw: BullMQ add → worker PUBLISH → subscriber`,
  );
  const row = (raw: number, baton: number) => ({ 'raw p50 ms': num(raw, 2), 'Baton p50 ms': num(baton, 2), ratio: ratio(baton, raw, 1) });
  printTable('sessions', {
    'one session': row(r.raw.oneMs, r.baton.oneMs),
    [`${r.burst} sessions at once`]: row(r.raw.burstMs, r.baton.burstMs),
    'one session, submit then stream (two requests)': row(r.raw.oneMs, r.batonTwoRequests.oneMs),
    [`${r.burst} sessions at once, two requests`]: row(r.raw.burstMs, r.batonTwoRequests.burstMs),
  });
}
