import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { BatonClient } from '../src/lib/client/client.ts';
import { createKeys } from '../src/lib/keys.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from '../test/helpers/fake-openai.ts';
import { spawnBaton, type BenchProcess } from './processes.ts';
import { num, printTable, ratio } from './table.ts';

/**
 * Hostile tenants, measured from the tenant beside them: scope A attacks with the surfaces a
 * client or admin key of its own can reach (the attacks issue 39 found), while scope B, on the
 * same API and worker processes and the same Redis, calls `whoami` and runs an agent in a loop.
 * Each attack row prints B's latency during it as a ratio to B's baseline measured in this run,
 * beside the work the attack got done (or was refused): what a limit is for is the ratio.
 *
 * Knobs: BENCH_HOSTILE_MS (8000) how long each attack and the baseline last.
 */
const ATTACK_MS = Number(process.env.BENCH_HOSTILE_MS ?? 8000);
const AGENTS = fileURLToPath(new URL('./bench-agents.ts', import.meta.url));
/** The bucket chat runs share in the provider row: 10 calls a second, which A's 20 submits a second outrun. */
const BUCKET_RPM = 600;
const CHAT_MODEL = 'gpt-4o-mini';
/** The longest a run of B's is waited for in a row (longer: counted as this long). */
const RUN_WAIT_MS = 30_000;
/** Turns of the large session the fork and history rows read. */
const TURNS = 42;

/** B's latency over a window: whoami (any key) and one run, submit → `end` event. */
export interface Latency { whoamiP50: number; whoamiP95: number; runP50: number; runMax: number; runs: number }
export interface AttackRow { attack: string; during: Latency; baseline: Latency; work: string }
export interface HostileBench { rows: AttackRow[]; seconds: number }

interface Stack {
  api: BenchProcess;
  worker: BenchProcess;
  fake: FakeOpenAI;
  redis: Redis;
  a: Tenant;
  b: Tenant;
  /** The parked-runs row's attacker: its parked runs hold their scope's slots for AGENT_GRACE_MS, so not A's. */
  parker: Tenant;
}
interface Tenant { scope: string; client: BatonClient; clientKey: string; adminKey: string; url: string }

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function benchHostile(redisUrl: string): Promise<HostileBench> {
  const t0 = performance.now();
  const stack = await startStack(redisUrl);
  try {
    const echoBase = await measureB(stack, 'echo', async () => {});
    const chatBase = await measureB(stack, 'chat', async () => {});
    const rows: AttackRow[] = [];
    /** Prepares an attack (unmeasured), then measures B while it runs. */
    const attack = async <P>(name: string, agent: 'echo' | 'chat', prepare: () => Promise<P>, run: (p: P, stop: AbortSignal) => Promise<string>) => {
      const p = await prepare();
      let work = '';
      const during = await measureB(stack, agent, async (stop) => { work = await run(p, stop); });
      rows.push({ attack: name, during, baseline: agent === 'echo' ? echoBase : chatBase, work });
    };
    await attack('schedules: 100 with 262 KB templates, 4 readers of the listing', 'echo', () => createSchedules(stack), readSchedules.bind(null, stack));
    const big = await bigSession(stack);
    await attack(`forks: 10 of a ${num(big.bytes / 1e6, 1)} MB session`, 'echo', async () => big.sessionId, (id) => forks(stack, id));
    await attack('history: 4 readers of …/messages?limit=200', 'echo', async () => big.sessionId, (id, stop) => historyReaders(stack, id, stop));
    await attack('parked runs: 256 KiB submits at the scope rate', 'echo', async () => undefined, (_, stop) => parkedFlood(stack, stop));
    await attack('stalled readers: 200 sockets replaying a 6 MB stream', 'echo', () => bigStream(stack), (runId) => stalledReaders(stack, runId));
    // Last: A's chat runs queued behind the bucket hold A's slots for a minute or more after the row.
    await attack(`provider bucket: A's chat runs at its submit rate, rpm ${BUCKET_RPM}`, 'chat', async () => undefined, (_, stop) => bucketFlood(stack, stop));
    return { rows, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await stopStack(stack);
  }
}

async function startStack(redisUrl: string): Promise<Stack> {
  const prefix = `bhos${randomBytes(4).toString('hex')}`;
  const fake = await startFakeOpenAI();
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'warn',
    OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'bench', OPENAI_MODEL: CHAT_MODEL,
    RATE_LIMITS: `openai:${CHAT_MODEL}=rpm:${BUCKET_RPM}`, WORKER_CONCURRENCY: '64',
  };
  const [api, worker] = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env, [AGENTS])]);
  const redis = new Redis(redisUrl);
  const store = new ApiKeyStore(redis, createKeys(prefix));
  const tenant = async (scope: string): Promise<Tenant> => {
    const clientKey = (await store.create(scope, 'client')).key;
    const adminKey = (await store.create(scope, 'admin')).key;
    return { scope, clientKey, adminKey, url: api.url!, client: new BatonClient({ url: api.url!, apiKey: clientKey, scope }) };
  };
  return { api, worker, fake, redis, a: await tenant('hostile-a'), b: await tenant('tenant-b'), parker: await tenant('hostile-parker') };
}

async function stopStack(s: Stack): Promise<void> {
  await Promise.allSettled([s.api.kill(), s.worker.kill(), s.fake.close()]);
  await s.redis.quit();
}

/** Runs `attack` while B measures for ATTACK_MS; the attack is told to stop when B is done. */
async function measureB(s: Stack, agent: 'echo' | 'chat', attack: (stop: AbortSignal) => Promise<void>): Promise<Latency> {
  const stop = new AbortController();
  // Held as a settled value: an attack that fails while B measures must not be an unhandled rejection.
  const attacking = attack(stop.signal).then(() => undefined, (err: unknown) => err);
  const until = performance.now() + ATTACK_MS;
  const whoami: number[] = [];
  const runs: number[] = [];
  const whoamiLoop = (async () => {
    while (performance.now() < until) {
      const t = performance.now();
      const r = await fetch(`${s.b.url}/v1/whoami`, { headers: { authorization: `Bearer ${s.b.clientKey}` } });
      await r.arrayBuffer();
      whoami.push(performance.now() - t);
      await sleep(20);
    }
  })();
  const runLoop = (async () => {
    let i = 0;
    while (performance.now() < until) {
      const t = performance.now();
      const run = await s.b.client.submit({ sessionId: `b-${agent}-${i++}`, agent, input: { content: 'hello from B' } });
      // A run held longer than RUN_WAIT_MS counts as that long (the figure is then a floor), so a row always ends.
      const signal = AbortSignal.timeout(RUN_WAIT_MS);
      try {
        for await (const e of s.b.client.stream(run.id, { signal })) if (e.type === 'end') break;
      } catch (err) {
        if (!signal.aborted) throw err;
      }
      runs.push(performance.now() - t);
      // At most 10 runs a second: B stays well inside its own submit rate (20/s by default).
      await sleep(100);
    }
  })();
  await Promise.all([whoamiLoop, runLoop]);
  stop.abort();
  const failed = await attacking;
  if (failed) throw failed;
  return { whoamiP50: pct(whoami, 50), whoamiP95: pct(whoami, 95), runP50: pct(runs, 50), runMax: Math.max(...runs), runs: runs.length };
}

/** A's raw HTTP: fetch with its key, the body read whole; returns the status, the body's bytes and its JSON. */
async function call(t: Tenant, method: string, path: string, body?: unknown, role: 'client' | 'admin' = 'client') {
  let r: Response;
  let text: string;
  try {
    r = await fetch(`${t.url}/v1/scopes/${t.scope}${path}`, {
      method,
      headers: { authorization: `Bearer ${role === 'admin' ? t.adminKey : t.clientKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    text = await r.text();
  } catch (err) {
    // A connection the API closed (a request timeout under load) is counted, not thrown: it is part of what the attack met.
    const code = ((err as Error).cause as { code?: string } | undefined)?.code ?? 'FETCH_FAILED';
    return { status: 0, bytes: 0, json: undefined, code, retryAfterMs: 100 };
  }
  let json: { nextCursor?: string | null; error?: { code?: string } } | undefined;
  try { json = JSON.parse(text); } catch { json = undefined; }
  // A refusal's Retry-After is whole seconds; a refused loop waits it (at most a second) before it tries again.
  const retryAfterMs = Math.min(1000, 1000 * Number(r.headers.get('retry-after') ?? 0.05));
  return { status: r.status, bytes: Buffer.byteLength(text), json, code: json?.error?.code, retryAfterMs };
}

/** Counts answers by status (and code), for the work column. */
class Tally {
  private readonly by = new Map<string, number>();
  add(status: number, code?: string): void {
    const k = code ? `${status} ${code}` : String(status);
    this.by.set(k, (this.by.get(k) ?? 0) + 1);
  }
  toString(): string {
    return [...this.by].map(([k, n]) => `${n}× ${k}`).join(', ');
  }
}

async function createSchedules(s: Stack): Promise<Tally> {
  const created = new Tally();
  const metadata = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, 'm'.repeat(200)]));
  const create = (i: number, chars: number) => call(s.a, 'POST', '/schedules', {
    // 1 January 00:00: no tick fires while the bench runs.
    cron: '0 0 1 1 *', run: { sessionId: `sched-${i}`, agent: 'echo', input: { content: 'x'.repeat(chars) }, metadata },
  }, 'admin');
  for (let i = 0; i < 100; i++) {
    // The row's 262 KB template; where a template cap refuses it, the largest a cap of 64 KiB lets in.
    let r = await create(i, 262_000);
    if (r.status === 413) {
      created.add(r.status, r.code);
      r = await create(i, 48_000);
    }
    created.add(r.status, r.code);
  }
  return created;
}

async function readSchedules(s: Stack, created: Tally, stop: AbortSignal): Promise<string> {
  const answers = new Tally();
  let maxBytes = 0;
  let bytes = 0;
  const reader = async () => {
    while (!stop.aborted) {
      // Walk every page a cursor offers, as the inspector does.
      let cursor: string | undefined;
      do {
        const r = await call(s.a, 'GET', `/schedules${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`);
        answers.add(r.status, r.code);
        bytes += r.bytes;
        maxBytes = Math.max(maxBytes, r.bytes);
        cursor = r.status === 200 ? r.json?.nextCursor ?? undefined : undefined;
        if (r.status === 429 || r.status === 0) await sleep(r.retryAfterMs);
      } while (cursor && !stop.aborted);
    }
  };
  await Promise.all(Array.from({ length: 4 }, reader));
  return `creates: ${created}; listing: ${answers}, ${num(bytes / 1e6, 1)} MB, largest ${num(maxBytes / 1e6, 2)} MB`;
}

/** 42 turns of 512 KB in one session of A's (echo answers its input: 256 KB each way, the largest input), about 21 MB. */
async function bigSession(s: Stack): Promise<{ sessionId: string; bytes: number }> {
  const sessionId = 'big';
  const content = 'y'.repeat(256_000);
  let bytes = 0;
  for (let turn = 0; turn < TURNS; turn++) {
    const run = await s.a.client.submit({ sessionId, agent: 'echo', input: { content } });
    for await (const e of s.a.client.stream(run.id)) if (e.type === 'end') break;
    bytes += 2 * content.length;
  }
  return { sessionId, bytes };
}

async function forks(s: Stack, sessionId: string): Promise<string> {
  const answers = new Tally();
  const mem0 = await usedMemory(s.redis);
  await s.redis.slowlog('RESET');
  for (let i = 0; i < 10; i++) {
    const r = await call(s.a, 'POST', `/sessions/${sessionId}/fork`, { atTurn: TURNS });
    answers.add(r.status, r.code);
  }
  const slowest = await slowestCall(s.redis);
  return `forks: ${answers}; Redis +${num((await usedMemory(s.redis) - mem0) / 1e6, 1)} MB; ${slowest}`;
}

async function historyReaders(s: Stack, sessionId: string, stop: AbortSignal): Promise<string> {
  const answers = new Tally();
  let bytes = 0;
  let maxBytes = 0;
  await s.redis.slowlog('RESET');
  const reader = async () => {
    while (!stop.aborted) {
      const r = await call(s.a, 'GET', `/sessions/${sessionId}/messages?limit=200`);
      answers.add(r.status, r.code);
      bytes += r.bytes;
      maxBytes = Math.max(maxBytes, r.bytes);
      if (r.status === 429) await sleep(r.retryAfterMs);
    }
  };
  await Promise.all(Array.from({ length: 4 }, reader));
  return `pages: ${answers}; ${num(bytes / 1e6, 1)} MB served, largest ${num(maxBytes / 1e6, 2)} MB; ${await slowestCall(s.redis)}`;
}

/** Submits of 256 KiB at A's submit rate to a runtime no worker serves: every accepted run stays parked. */
async function parkedFlood(s: Stack, stop: AbortSignal): Promise<string> {
  const answers = new Tally();
  const mem0 = await usedMemory(s.redis);
  const content = 'z'.repeat(256 * 1024);
  let i = 0;
  while (!stop.aborted) {
    const r = await call(s.parker, 'POST', '/runs', { sessionId: `parked-${i++}`, agent: 'echo', runtime: 'nobody', input: { content } });
    answers.add(r.status, r.code);
    if (r.status === 429) await sleep(r.retryAfterMs);
  }
  return `submits: ${answers}; Redis +${num((await usedMemory(s.redis) - mem0) / 1e6, 1)} MB`;
}

/** A's chat runs as fast as its submit rate lets them in, each one model call through the shared bucket. */
async function bucketFlood(s: Stack, stop: AbortSignal): Promise<string> {
  s.fake.script('from A', [answer('ok')]);
  const answers = new Tally();
  const calls0 = s.fake.requests.length;
  let i = 0;
  while (!stop.aborted) {
    const r = await call(s.a, 'POST', '/runs', { sessionId: `chat-${i++}`, agent: 'chat', input: { content: 'from A' } });
    answers.add(r.status, r.code);
    await sleep(r.status === 429 ? r.retryAfterMs : 50);
  }
  return `submits: ${answers}; model calls made: ${s.fake.requests.length - calls0}`;
}

/** A finished run of A's whose stream holds 6 MB of tokens (92 of 64 Ki characters, the largest a token event gets). */
async function bigStream(s: Stack): Promise<string> {
  const run = await s.a.client.submit({
    sessionId: 'stalled', agent: 'bench-streamer', input: { content: 'x' }, metadata: { mode: 'large', tokens: 92, chars: 65_536 },
  });
  for await (const e of s.a.client.stream(run.id)) if (e.type === 'end') break;
  return run.id;
}

/** 200 sockets that ask for a finished 6 MB stream and never read; the API's RSS before and 5 s after. */
async function stalledReaders(s: Stack, runId: string): Promise<string> {
  const rss0 = rssMiB(s.api.pid);
  const url = new URL(s.a.url);
  const sockets = Array.from({ length: 200 }, () => {
    const socket = connect(Number(url.port), url.hostname);
    socket.on('error', () => {});
    socket.write(`GET /v1/scopes/${s.a.scope}/runs/${runId}/events HTTP/1.1\r\nhost: ${url.host}\r\n` +
      `authorization: Bearer ${s.a.clientKey}\r\naccept: text/event-stream\r\n\r\n`);
    socket.pause();
    return socket;
  });
  await sleep(5000);
  const rss1 = rssMiB(s.api.pid);
  for (const socket of sockets) socket.destroy();
  return `API RSS ${num(rss0, 0)} → ${num(rss1, 0)} MiB (${num(((rss1 - rss0) * 1024) / 200, 0)} KiB per stalled reader)`;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

async function usedMemory(redis: Redis): Promise<number> {
  return Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1] ?? NaN);
}

/** The longest command SLOWLOG holds since its last reset (the server's default threshold: 10 ms), in ms, and its name. */
async function slowestCall(redis: Redis): Promise<string> {
  const entries = (await redis.slowlog('GET', 128)) as [number, number, number, unknown[]][];
  const slowest = entries.reduce<[number, number, number, unknown[]] | undefined>((max, e) => (max && max[2] >= e[2] ? max : e), undefined);
  if (!slowest) return 'no call over 10 ms';
  // FCALL's first argument names the function (the transition).
  const [command, name] = slowest[3].map(String);
  return `slowest call ${num(slowest[2] / 1000, 0)} ms (${command}${command.toUpperCase() === 'FCALL' ? ` ${name}` : ''})`;
}

export function printHostile(r: HostileBench): void {
  console.log(`\nhostile tenants: scope A attacks for ${ATTACK_MS / 1000} s a row while scope B calls whoami and runs an agent in a loop (${num(r.seconds, 0)} s in all)`);
  const rows: Record<string, Record<string, string>> = {};
  for (const x of r.rows) {
    rows[x.attack] = {
      'B whoami p50 / p95 ms': `${num(x.during.whoamiP50)} / ${num(x.during.whoamiP95)}`,
      'vs baseline p50 / p95': `${ratio(x.during.whoamiP50, x.baseline.whoamiP50, 1)} / ${ratio(x.during.whoamiP95, x.baseline.whoamiP95, 1)}`,
      'B run p50 / max ms': `${num(x.during.runP50)} / ${num(x.during.runMax)}`,
      'vs baseline p50 / max': `${ratio(x.during.runP50, x.baseline.runP50, 1)} / ${ratio(x.during.runMax, x.baseline.runMax, 1)}`,
      'B runs': String(x.during.runs),
      "A's work": x.work,
    };
  }
  const base = r.rows.find((x) => !x.attack.startsWith('provider'))?.baseline;
  const chatBase = r.rows.find((x) => x.attack.startsWith('provider'))?.baseline;
  if (base) console.log(`B's baseline, echo: whoami p50 ${num(base.whoamiP50)} ms, p95 ${num(base.whoamiP95)} ms; run p50 ${num(base.runP50)} ms, max ${num(base.runMax)} ms`);
  if (chatBase) console.log(`B's baseline, chat: run p50 ${num(chatBase.runP50)} ms, max ${num(chatBase.runMax)} ms`);
  printTable('attack', rows);
}
