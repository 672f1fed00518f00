import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { SseParser } from '../src/lib/client/sse-parser.ts';
import { createKeys } from '../src/lib/keys.ts';
import { spawnBaton, spawnScript } from './processes.ts';
import { percentileOf } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

/**
 * Time to first token: from the moment a client submits to the moment it holds the run's
 * first `token` event, the agent emitting at once (the built-in echo agent). Baton: the typed
 * client's submitAndStream() (one request: the submit's answer is the run's SSE stream) to a
 * `baton api` process, the worker a `baton worker` process; and, printed beside it, submit()
 * then stream() (two requests); the one request over fetch (the client's `fetch` option: its
 * transport in browsers, and the default in Node before it sent with Node's http module); and
 * the one request made with node:http and read with the client's SSE parser, nothing else
 * (the service's own share). Raw, measured in turns with those (its processes run beside
 * Baton's): BullMQ `add` from this process → a bare BullMQ worker in a process of its own
 * PUBLISHes → a subscriber here (subscribed beforehand; pub/sub has no log to read from).
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
  /** One request, the typed client over fetch. */
  batonFetch: FirstTokenSide;
  /** One request, sent and read with node:http instead of the typed client. */
  batonBareHttp: FirstTokenSide;
  raw: FirstTokenSide;
}

type Way = (sessionId: string) => Promise<number>;
type BatonWays = Record<'baton' | 'batonTwoRequests' | 'batonFetch' | 'batonBareHttp', Way>;

/** Both sides' processes run side by side and their ways take turns, raw's with Baton's. */
export async function benchFirstToken(redisUrl: string): Promise<FirstTokenBench> {
  const baton = await startBaton(redisUrl);
  try {
    const raw = await startRaw(redisUrl);
    try {
      return { samples: SAMPLES, rounds: ROUNDS, burst: BURST, ...await sample({ raw: raw.way, ...baton.ways }) };
    } finally {
      await raw.close();
    }
  } finally {
    await baton.close();
  }
}

/**
 * For each way, p50 of `first(session)` run one after another in one session of its own, then
 * in bursts of BURST sessions. The ways take turns, a sample or a burst each, so none is
 * measured in a quieter or a warmer stretch of the processes than the others.
 */
async function sample<K extends string>(ways: Record<K, Way>): Promise<Record<K, FirstTokenSide>> {
  const names = Object.keys(ways) as K[];
  for (const k of names) for (let i = 0; i < WARMUP; i++) await ways[k](`${k}-warm`);
  const one = new Map(names.map((k) => [k, [] as number[]]));
  const burst = new Map(names.map((k) => [k, [] as number[]]));
  for (let i = 0; i < SAMPLES; i++) for (const k of names) one.get(k)!.push(await ways[k](`${k}-one`));
  for (let r = 0; r < ROUNDS; r++) {
    for (const k of names) burst.get(k)!.push(...await Promise.all(Array.from({ length: BURST }, (_, i) => ways[k](`${k}-burst-${r}-${i}`))));
  }
  return Object.fromEntries(names.map((k) => [k, {
    oneMs: percentileOf(one.get(k)!, 50),
    burstMs: percentileOf(burst.get(k)!, 50),
  }])) as Record<K, FirstTokenSide>;
}

/** A `baton api` and a `baton worker` process, warmed, and the ways to take Baton's first token through them. */
async function startBaton(redisUrl: string): Promise<{ ways: BatonWays; close(): Promise<void> }> {
  const prefix = `bttft${randomBytes(4).toString('hex')}`;
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0',
    WORKER_CONCURRENCY: String(BURST), MAX_ACTIVE_PER_SCOPE: String(BURST * 2), SUBMIT_RATE_PER_SEC: '0',
  };
  const [api, worker] = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env)]);
  const admin = new Redis(redisUrl);
  let bare: ReturnType<typeof bareSubmitAndStream> | undefined;
  try {
    const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
    const client = new BatonClient({ url: api.url!, apiKey, scope: 'bench' });
    const overFetch = new BatonClient({ url: api.url!, apiKey, scope: 'bench', fetch: globalThis.fetch });
    bare = bareSubmitAndStream(api.url!, apiKey);
    const { firstToken: bareFirstToken } = bare;
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
      for (const c of [client, overFetch]) {
        const { runId, events } = await c.submitAndStream({ sessionId: 'warm', input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
        await firstToken(runId, events);
      }
      const run = await client.submit({ sessionId: 'warm', input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
      await firstToken(run.id, client.stream(run.id));
      await bareFirstToken('warm', performance.now());
    }
    const oneRequest = (c: BatonClient) => async (sessionId: string) => {
      const t0 = performance.now();
      const { runId, events } = await c.submitAndStream({ sessionId, input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
      return (await firstToken(runId, events)) - t0;
    };
    const ways: BatonWays = {
      baton: oneRequest(client),
      batonTwoRequests: async (sessionId) => {
        const t0 = performance.now();
        const run = await client.submit({ sessionId, input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
        return (await firstToken(run.id, client.stream(run.id))) - t0;
      },
      batonFetch: oneRequest(overFetch),
      batonBareHttp: (sessionId) => bareFirstToken(sessionId, performance.now()),
    };
    return { ways, close };
  } catch (err) {
    await close();
    throw err;
  }

  async function close(): Promise<void> {
    bare?.close();
    await admin.quit();
    await Promise.all([api.kill(), worker.kill()]);
  }
}

/**
 * submitAndStream() over node:http: POST with `Accept: text/event-stream`, events parsed with
 * the client's SseParser; resolves with the ms from `t0` to the first `token` event once the
 * stream has ended (a session's next run would queue behind this one until then).
 */
function bareSubmitAndStream(apiUrl: string, apiKey: string) {
  const agent = new Agent({ keepAlive: true });
  const url = new URL(`${apiUrl}/v1/scopes/bench/runs`);
  const firstToken = (sessionId: string, t0: number) => new Promise<number>((resolve, reject) => {
    const body = JSON.stringify({ sessionId, input: { content: 'hello' }, runtime: 'bench', agent: 'echo' });
    const req = request(url, {
      method: 'POST', agent,
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', accept: 'text/event-stream', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      if (res.statusCode !== 202) {
        res.resume();
        return reject(new Error(`submit answered ${res.statusCode}`));
      }
      const parser = new SseParser();
      let firstAt: number | undefined;
      res.setEncoding('utf8');
      res.on('data', (text: string) => {
        for (const m of parser.push(text)) if (m.event === 'token') firstAt ??= performance.now();
      });
      res.on('end', () => (firstAt === undefined ? reject(new Error('the run ended without a token')) : resolve(firstAt - t0)));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
  return { firstToken, close: () => agent.destroy() };
}

/** A bare BullMQ worker process that PUBLISHes, and the way to time add → message through it. */
async function startRaw(redisUrl: string): Promise<{ way: Way; close(): Promise<void> }> {
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
  const way: Way = async () => {
    const channel = `${name}:${seq++}`;
    const t0 = performance.now();
    const arrived = new Promise<number>((resolve) => waiting.set(channel, () => resolve(performance.now())));
    await queue.add('run', { channel }, { removeOnComplete: true });
    const at = await arrived;
    waiting.delete(channel);
    return at - t0;
  };
  return {
    way,
    async close() {
      await worker.stop();
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
      await Promise.all([conn.quit(), sub.quit()]);
    },
  };
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
    'one session, the typed client over fetch': row(r.raw.oneMs, r.batonFetch.oneMs),
    [`${r.burst} sessions at once, over fetch`]: row(r.raw.burstMs, r.batonFetch.burstMs),
    'one session, node:http instead of the typed client': row(r.raw.oneMs, r.batonBareHttp.oneMs),
    [`${r.burst} sessions at once, node:http`]: row(r.raw.burstMs, r.batonBareHttp.burstMs),
  });
}
