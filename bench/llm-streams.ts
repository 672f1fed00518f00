import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import type { BatonClient } from '../src/lib/client/client.ts';
import { runtimeCounts } from '../src/lib/tenancy/runtime-counts.ts';
import { createKeys } from '../src/lib/keys.ts';
import { longRun, streamer, clockMs } from './bench-agents.ts';
import { allAtOnceEnv, processCpuSeconds, spawnBaton, spawnScript, type BenchProcess } from './processes.ts';
import { meterRedis, percentileOf, sharedRedisNote, withBenchRedis } from './redis-stats.ts';
import { clientFor, rawSubscriber, readStreamerRuns, summarize, type Latency } from './streams.ts';
import { num, printTable, ratio, type Cell } from './table.ts';

/**
 * Issue 32's figures: what streaming at a model's pace costs Redis, next to the least a
 * lossless, resumable stream costs, both measured in this run against the same Redis.
 *
 * - LLM-paced streams, readers apart: for each N of BENCH_LLM_RUNS, N runs at once, each
 *   emitting BENCH_LLM_TOKENS tokens one every BENCH_LLM_TOKEN_MS (500 tokens at 50 tokens/s by
 *   default). The API and the worker are `baton api` and `baton worker` processes; the
 *   readers are this process (the typed client over SSE), every token carrying its emit time.
 *   The runs are submitted and their readers connected first; once every reader has seen its
 *   run running (all N claimed at once: no limit caps them), the bench tells the agents when
 *   to start, and run i starts i/N of an interval after the others' start, so the streams'
 *   tokens are spread over the interval as independent model streams are. The measured window
 *   is the whole lifecycle: from before the submits to every run succeeded and its job done.
 *   Raw, while no Baton process is alive: N publishers in a process of their own
 *   (bench/raw-publisher.ts) each doing per token an XADD to its stream and a PUBLISH,
 *   pipelined, at the same pace and spread; one subscriber connection here notes arrival.
 *   Each layout is measured BENCH_LLM_ROUNDS times (2) and the passes pooled; raw's passes are
 *   split before and after Baton's, so a drift of the machine's speed falls on both.
 *   Printed for both: Redis CPU per delivered token (INFO cpu delta ÷ tokens), Redis commands
 *   per token (INFO commandstats delta ÷ tokens), reader latency p50 / p99 (emit → reader),
 *   the concurrent 50-tokens/s streams one Redis core carries (1 s ÷ the Redis CPU of a
 *   second of one stream), and CPU per token of the processes: the worker (raw: the
 *   publisher), the API, and this process's readers (raw: the subscriber), from
 *   /proc/<pid>/stat or the process's own getrusage.
 * - A lone run, the same with N = 1: what one user sees when nothing else streams.
 * - Long runs stay flat: a 300-step agent (each step memoized, emitting its start time) read
 *   from outside over SSE: the mean gap between step tokens over its last ten steps ÷ over its
 *   first ten; and with 10 waits after its steps, the latency from the resume request to the
 *   token of the step after the 10th wait, with 300 memoized steps before the waits against 10
 *   (every resume runs the agent again from the top, its memo answering).
 *
 * Every figure is the server's or a process's own: run it on a Redis nothing else uses (the
 * bench's own redis-server, REDIS_URL unset). Knobs: BENCH_LLM_RUNS (200,500),
 * BENCH_LLM_TOKENS (500: a real answer's length), BENCH_LLM_TOKEN_MS (20), BENCH_LLM_SCOPES (1: runs spread round-robin
 * over that many scopes), BENCH_LLM_ROUNDS (2), BENCH_LLM_LONG_RUNS (16 runs of each length),
 * BENCH_LLM_PROFILE (1: Redis time per token by command).
 *   node --import tsx bench/llm-streams.ts
 */

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name];
  const n = raw === undefined || raw === '' ? fallback : Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name}: a whole number ≥ 1 expected, got "${raw}"`);
  return n;
}

function runCounts(): number[] {
  const raw = process.env.BENCH_LLM_RUNS;
  const counts = raw ? raw.split(',').map((s) => Number(s.trim())) : [200, 500];
  // One worker process streams them all at once: WORKER_CONCURRENCY's ceiling.
  if (counts.length === 0 || counts.some((n) => !Number.isInteger(n) || n < 1 || n > 1000)) {
    throw new Error(`BENCH_LLM_RUNS: comma-separated run counts from 1 to 1000 expected, got "${raw}"`);
  }
  return counts;
}

export const LLM_RUNS = runCounts();
export const LLM_TOKENS = positiveInt('BENCH_LLM_TOKENS', 500);
export const LLM_TOKEN_MS = positiveInt('BENCH_LLM_TOKEN_MS', 20);
const SCOPES = positiveInt('BENCH_LLM_SCOPES', 1);
const LONG_REPEATS = positiveInt('BENCH_LLM_LONG_RUNS', 16);
const ROUNDS = positiveInt('BENCH_LLM_ROUNDS', 2);
/** BENCH_LLM_PROFILE=1: also print Redis's time per token by command. */
const PROFILE = process.env.BENCH_LLM_PROFILE === '1';
const LONG_STEPS = 300;
const SHORT_STEPS = 10;
const WAITS = 10;
/** The rate the capacity figure is for: tokens per second of one stream. */
const TOKENS_PER_SEC = 1000 / LLM_TOKEN_MS;
/** The agents start this long after the bench tells them to (they poll for it every 10 ms). */
const GO_LEAD_MS = 100;
/** How long every run may take to be claimed and read before the bench gives up. */
const ALL_RUNNING_TIMEOUT_MS = 90_000;
const AGENTS = fileURLToPath(new URL('./bench-agents.ts', import.meta.url));

/**
 * The streaming goals: Redis CPU per token no more than raw's, at a latency nobody sees (a
 * screen paints every 16.7 ms; chat pages smooth tokens on purpose), so the reader's latency
 * is held to raw's plus a bound rather than to a multiple of raw's few milliseconds.
 */
export const LLM_GOALS = {
  /** Redis CPU per streamed token, × raw's, at every N. */
  cpuVsRaw: 1.0,
  /** Reader p50 and p99 at every N: at most raw's plus this many ms. */
  p50OverRawMs: 25,
  p99OverRawMs: 50,
  /** A lone run's token p50, × raw's. */
  loneP50VsRaw: 2,
  /** "Flat": the bench's reading, as run.ts's claim rows, with room for a shared machine's noise. */
  flat: 1.5,
};

/** One layout's cost, per token delivered to a reader, over every pass of it. */
export interface StreamCost {
  runs: number;
  /** Tokens delivered to readers, over every pass. */
  tokens: number;
  /** Tokens per token event a reader received (raw: 1); above 1, tokens were coalesced. */
  tokensPerEvent: number;
  /** The measured windows, one per pass. */
  seconds: number[];
  redisCpuUsPerToken: number | undefined;
  /** The same, pass by pass: how far apart passes of the same load land. */
  redisCpuUsPerTokenByPass: (number | undefined)[];
  commandsPerToken: number;
  latency: Latency;
  /** The process that writes the tokens (Baton: the worker; raw: the publisher), CPU µs per token. */
  writerCpuUs: number;
  /** The API process (Baton only), CPU µs per token. */
  apiCpuUs?: number;
  /** The readers, this process (Baton: the typed clients; raw: the subscriber), CPU µs per token. */
  readerCpuUs: number;
  /** Per Redis command: calls and µs per token (INFO commandstats; a function's inner commands under their own names as well). */
  byCommand: Map<string, { calls: number; usec: number }>;
}

export interface LongRuns {
  repeats: number;
  /** Mean step-to-step gap over the first ten and the last ten steps of a 300-step run (p50 over the runs). */
  firstTenGapMs: number;
  lastTenGapMs: number;
  /** Resume request → the token of the step after the 10th wait (p50 over the runs), by steps before the waits. */
  tenthResumeMs: { short: number; long: number };
  /** The same over all ten resumes of every run. */
  anyResumeMs: { short: number; long: number };
}

export interface LlmStreamsBench {
  scopes: number;
  /** Passes of each layout (BENCH_LLM_ROUNDS). */
  rounds: number;
  /** Redis's CPU doing nothing (its timers), ms per second: in every window, and most of a lone run's per-token figure. */
  redisIdleCpuMsPerSec: number | undefined;
  rows: { runs: number; raw: StreamCost; baton: StreamCost }[];
  lone: { raw: StreamCost; baton: StreamCost };
  long: LongRuns;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Starts measuring Redis, the processes `pids` and this one; the returned function ends it. */
async function openWindow(admin: Redis, pids: number[]) {
  const redis = await meterRedis(admin);
  const t0 = performance.now();
  const self0 = process.cpuUsage();
  const procs0 = pids.map(processCpuSeconds);
  return async () => {
    const work = await redis();
    const self = process.cpuUsage(self0);
    return {
      ...work,
      seconds: (performance.now() - t0) / 1000,
      procCpuUs: pids.map((pid, i) => (processCpuSeconds(pid) - procs0[i]) * 1e6),
      selfCpuUs: self.user + self.system,
    };
  };
}

type Window = Awaited<ReturnType<Awaited<ReturnType<typeof openWindow>>>>;

/** What one pass measured, in totals. */
interface Pass {
  tokens: number;
  tokenEvents: number;
  window: Window;
  latencies: number[];
  writerCpuUs: number;
  apiCpuUs?: number;
}

/** Passes of one layout added up: totals summed, latencies pooled. */
function costOf(runs: number, passes: Pass[]): StreamCost {
  const sum = (f: (p: Pass) => number) => passes.reduce((n, p) => n + f(p), 0);
  const tokens = sum((p) => p.tokens);
  // A reduce, not Math.min(...): 500 runs × 500 tokens are more arguments than a call takes.
  const earliest = passes.reduce((m, p) => p.latencies.reduce((a, b) => Math.min(a, b), m), Infinity);
  // Emit and arrival are stamped in different processes from one clock: below zero is a bench bug.
  if (earliest < 0) throw new Error(`a token reached its reader ${-earliest} ms before it was emitted: the processes' clocks disagree`);
  const redisCpu = (ps: Pass[], n: number) => (ps.some((p) => p.window.cpuSeconds === undefined)
    ? undefined : (ps.reduce((us, p) => us + p.window.cpuSeconds! * 1e6, 0) / n));
  return {
    runs, tokens,
    tokensPerEvent: tokens / sum((p) => p.tokenEvents),
    seconds: passes.map((p) => p.window.seconds),
    redisCpuUsPerToken: redisCpu(passes, tokens),
    redisCpuUsPerTokenByPass: passes.map((p) => redisCpu([p], p.tokens)),
    commandsPerToken: sum((p) => p.window.commands) / tokens,
    latency: summarize(passes.flatMap((p) => p.latencies)),
    writerCpuUs: sum((p) => p.writerCpuUs) / tokens,
    apiCpuUs: passes.every((p) => p.apiCpuUs !== undefined) ? sum((p) => p.apiCpuUs!) / tokens : undefined,
    readerCpuUs: sum((p) => p.window.selfCpuUs) / tokens,
    byCommand: perToken(passes.map((p) => p.window.byCommand), tokens),
  };
}

/** Command stats of several windows added up, per token. */
function perToken(windows: Map<string, { calls: number; usec: number }>[], tokens: number): Map<string, { calls: number; usec: number }> {
  const out = new Map<string, { calls: number; usec: number }>();
  for (const w of windows) {
    for (const [name, c] of w) {
      const t = out.get(name) ?? { calls: 0, usec: 0 };
      out.set(name, { calls: t.calls + c.calls / tokens, usec: t.usec + c.usec / tokens });
    }
  }
  return out;
}

const channels = (tag: string, runs: number) => Array.from({ length: runs }, (_, i) => `raw-${tag}-${i}`);

/** A raw publisher process for `runs` streams, started and waiting for its signal. */
async function rawPublisher(redisUrl: string, runs: number) {
  const tag = randomBytes(4).toString('hex');
  const options = JSON.stringify({ xadd: true, onSignal: true, spread: true });
  const proc = await spawnScript('./raw-publisher.ts', [redisUrl, tag, String(runs), String(LLM_TOKENS), String(LLM_TOKEN_MS), options]);
  return { tag, runs, proc };
}

/** The raw pipeline: the publisher is signalled once this process has subscribed and the window is open. */
async function rawPass(redisUrl: string, admin: Redis, p: Awaited<ReturnType<typeof rawPublisher>>): Promise<Pass> {
  const sub = await rawSubscriber(redisUrl, channels(p.tag, p.runs));
  try {
    const stop = await openWindow(admin, []);
    process.kill(p.proc.pid, 'SIGUSR1');
    const tokens = p.runs * LLM_TOKENS;
    await sub.collect(tokens, LLM_TOKENS * LLM_TOKEN_MS + 30_000);
    const writerCpuUs = Number((await p.proc.printed(/^done (\d+)$/m, 30_000))[1]);
    return { tokens, tokenEvents: tokens, window: await stop(), latencies: sub.latencies, writerCpuUs };
  } finally {
    await sub.close();
    await p.proc.kill();
  }
}

interface Fleet {
  api: BenchProcess;
  worker: BenchProcess;
  admin: Redis;
  prefix: string;
  scopes: string[];
  clients: BatonClient[];
  /** Where the go files are written. */
  dir: string;
  /** Runs of this fleet that succeeded so far. */
  succeeded: number;
}

async function startFleet(redisUrl: string, admin: Redis, dir: string): Promise<Fleet> {
  const most = Math.max(...LLM_RUNS);
  const prefix = `bllm${randomBytes(4).toString('hex')}`;
  const perScope = Math.ceil(most / SCOPES);
  // Every run streams at once (one scope's runs are fewer than the workers' slots, so there is
  // no contention for the fair share to settle).
  const env = allAtOnceEnv(redisUrl, prefix, most, perScope);
  const [api, worker] = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env, [AGENTS])]);
  const fleet: Fleet = { api, worker, admin, prefix, scopes: [], clients: [], dir, succeeded: 0 };
  try {
    fleet.scopes = Array.from({ length: SCOPES }, (_, i) => (SCOPES === 1 ? 'bench' : `bench${i}`));
    fleet.clients = await Promise.all(fleet.scopes.map((s) => clientFor(redisUrl, prefix, api.url!, s)));
    return fleet;
  } catch (err) {
    await Promise.all([api.kill(), worker.kill()]);
    throw err;
  }
}

/** Resolves once every run of the fleet so far has succeeded and its BullMQ job is done. */
async function settled(f: Fleet, agent: string): Promise<void> {
  const keys = createKeys(f.prefix);
  const active = `${keys.queuePrefix('bench')}:${agent}:active`;
  const until = Date.now() + 60_000;
  for (;;) {
    const stats = await Promise.all(f.scopes.map((s) => f.admin.hgetall(keys.scope(s).stats('bench'))));
    const succeeded = stats.reduce((n, h) => n + runtimeCounts(h).succeeded, 0);
    if (succeeded >= f.succeeded && (await f.admin.llen(active)) === 0) return;
    if (Date.now() > until) throw new Error(`${succeeded} of ${f.succeeded} runs succeeded after 60 s`);
    await sleep(20);
  }
}

/** Writes the agents' start time where they poll for it (renamed into place: never read half written). */
function go(file: string, at: number): void {
  writeFileSync(`${file}.tmp`, String(at));
  renameSync(`${file}.tmp`, file);
}

/** N LLM-paced runs at once through the API and worker processes, readers here. */
async function batonPass(f: Fleet, runs: number): Promise<Pass> {
  const tag = `llm${runs}-${randomBytes(3).toString('hex')}`;
  const goFile = join(f.dir, `go-${tag}`);
  const running = new Set<number>();
  let allRunning!: () => void;
  const started = new Promise<void>((r) => { allRunning = r; });
  const abort = new AbortController();
  // Every reader listens on it.
  setMaxListeners(0, abort.signal);
  const stop = await openWindow(f.admin, [f.worker.pid, f.api.pid]);
  const reading = readStreamerRuns((i) => f.clients[i % f.clients.length], {
    runs, tag, tokens: LLM_TOKENS, signal: abort.signal,
    metadata: (i) => ({ mode: 'latency', tokens: LLM_TOKENS, intervalMs: LLM_TOKEN_MS, goFile, phaseMs: (i * LLM_TOKEN_MS) / runs }),
    onRunning: (i) => {
      running.add(i);
      if (running.size === runs) allRunning();
    },
  });
  f.succeeded += runs;
  // Raced only: once every run is running, the readers' end is awaited below.
  const endedEarly = reading.then(() => { throw new Error('the runs ended before they were told to start'); });
  endedEarly.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      started,
      endedEarly,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(
          `${running.size} of ${runs} runs running after ${ALL_RUNNING_TIMEOUT_MS / 1000} s: ` +
          'something caps them (WORKER_CONCURRENCY, the scope\'s maxActive, the fair share) or the machine is too slow',
        )), ALL_RUNNING_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    abort.abort();
    go(goFile, clockMs());
    await reading.catch(() => {});
    throw err;
  } finally {
    clearTimeout(timer);
  }
  go(goFile, clockMs() + GO_LEAD_MS);
  const { latencies, tokenEvents } = await reading;
  await settled(f, streamer.name);
  const window = await stop();
  return { tokens: runs * LLM_TOKENS, tokenEvents, window, latencies, writerCpuUs: window.procCpuUs[0], apiCpuUs: window.procCpuUs[1] };
}

interface LongRun { stamps: number[]; resumes: number[] }

/** One bench-long run to its end, read over SSE; each wait is resumed as soon as the run parks on it. */
async function oneLongRun(client: BatonClient, steps: number): Promise<LongRun> {
  const run = await client.submit({
    sessionId: `long-${randomBytes(4).toString('hex')}`, input: { content: 'x' }, runtime: 'bench', agent: longRun.name,
    metadata: { steps, waits: WAITS },
  });
  const stamps: number[] = [];
  const resumes: number[] = [];
  let sentAt: number | undefined;
  let status: string | undefined;
  for await (const e of client.stream(run.id)) {
    if (e.type === 'token') {
      for (const s of e.data.text.split('|')) {
        if (!s) continue;
        stamps.push(Number(s));
        if (sentAt !== undefined) resumes.push(Number(s) - sentAt);
        sentAt = undefined;
      }
    } else if (e.type === 'status' && e.data.status === 'waiting') {
      const key = e.data.waits?.[0]?.key;
      if (!key) throw new Error(`run ${run.id} waits on nothing its event names`);
      sentAt = clockMs();
      await client.resume(run.id, key, 'go');
    } else if (e.type === 'end') {
      status = e.data.status;
    }
  }
  if (status !== 'succeeded' || stamps.length !== steps + WAITS || resumes.length !== WAITS) {
    throw new Error(`long run ${run.id}: ${status}, ${stamps.length} of ${steps + WAITS} step tokens, ${resumes.length} of ${WAITS} resumes`);
  }
  return { stamps, resumes };
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function longRuns(f: Fleet): Promise<LongRuns> {
  const client = f.clients[0];
  // Once each, unmeasured: the processes' step, wait and resume paths run optimized code after.
  await oneLongRun(client, SHORT_STEPS);
  await oneLongRun(client, LONG_STEPS);
  const short: LongRun[] = [];
  const long: LongRun[] = [];
  // Taken in turn, so a drift of the machine's speed falls on both lengths alike.
  for (let r = 0; r < LONG_REPEATS; r++) {
    short.push(await oneLongRun(client, SHORT_STEPS));
    long.push(await oneLongRun(client, LONG_STEPS));
  }
  const gaps = (run: LongRun) => {
    const steps = run.stamps.slice(0, LONG_STEPS);
    return steps.slice(1).map((t, i) => t - steps[i]);
  };
  const p50 = (xs: number[]) => percentileOf(xs, 50);
  return {
    repeats: LONG_REPEATS,
    firstTenGapMs: p50(long.map((run) => mean(gaps(run).slice(0, 10)))),
    lastTenGapMs: p50(long.map((run) => mean(gaps(run).slice(-10)))),
    tenthResumeMs: { short: p50(short.map((run) => run.resumes[WAITS - 1])), long: p50(long.map((run) => run.resumes[WAITS - 1])) },
    anyResumeMs: { short: p50(short.flatMap((run) => run.resumes)), long: p50(long.flatMap((run) => run.resumes)) },
  };
}

export async function benchLlmStreams(redisUrl: string): Promise<LlmStreamsBench> {
  const admin = new Redis(redisUrl);
  const dir = mkdtempSync(join(tmpdir(), 'baton-llm-'));
  const sizes = [...LLM_RUNS, 1];
  // Raw's passes, each a publisher process of its own, all started now (tsx takes seconds to start).
  const publishers: Awaited<ReturnType<typeof rawPublisher>>[] = [];
  try {
    const started = await Promise.allSettled(Array.from({ length: ROUNDS }, () => sizes).flat().map((n) => rawPublisher(redisUrl, n)));
    for (const p of started) if (p.status === 'fulfilled') publishers.push(p.value);
    for (const p of started) if (p.status === 'rejected') throw p.reason;
    // What Redis spends doing nothing (its timers), the floor under every window's figure.
    const idle = await openWindow(admin, []);
    await sleep(1000);
    const idleWork = await idle();
    const redisIdleCpuMsPerSec = idleWork.cpuSeconds === undefined ? undefined : (idleWork.cpuSeconds * 1000) / idleWork.seconds;
    // Raw's passes are split before and after Baton's, so a drift of the machine's speed falls on
    // both; never with a Baton process alive, whose timers' commands would count in raw's windows.
    const raw = sizes.map(() => [] as Pass[]);
    const rawRound = async () => {
      for (const [i] of sizes.entries()) raw[i].push(await rawPass(redisUrl, admin, publishers.shift()!));
    };
    for (let r = 0; r < Math.ceil(ROUNDS / 2); r++) await rawRound();
    const baton = sizes.map(() => [] as Pass[]);
    let long: LongRuns;
    const f = await startFleet(redisUrl, admin, dir);
    try {
      // The smallest load once, unmeasured: fresh processes run their first events in code V8
      // has not optimized yet, and a deployed API and worker have long been past that.
      await batonPass(f, Math.min(...LLM_RUNS));
      for (let r = 0; r < ROUNDS; r++) {
        for (const [i, n] of sizes.entries()) baton[i].push(await batonPass(f, n));
      }
      long = await longRuns(f);
    } finally {
      await Promise.all([f.api.kill(), f.worker.kill()]);
    }
    for (let r = Math.ceil(ROUNDS / 2); r < ROUNDS; r++) await rawRound();
    const at = (i: number) => ({ raw: costOf(sizes[i], raw[i]), baton: costOf(sizes[i], baton[i]) });
    return {
      scopes: SCOPES,
      rounds: ROUNDS,
      redisIdleCpuMsPerSec,
      rows: LLM_RUNS.map((runs, i) => ({ runs, ...at(i) })),
      lone: at(LLM_RUNS.length),
      long,
    };
  } finally {
    await Promise.all(publishers.map((p) => p.proc.kill()));
    await admin.quit();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Concurrent streams of TOKENS_PER_SEC one Redis core carries at this Redis CPU per token. */
const streamsPerCore = (c: StreamCost) => (c.redisCpuUsPerToken ? 1e6 / (c.redisCpuUsPerToken * TOKENS_PER_SEC) : undefined);

export function printLlmStreams(r: LlmStreamsBench): void {
  console.log(
    `\nLLM-paced streams: N runs at once × ${LLM_TOKENS} tokens, one every ${LLM_TOKEN_MS} ms (${num(TOKENS_PER_SEC, 0)} tokens/s), ` +
    `API and worker processes, readers here (typed client over SSE)${r.scopes > 1 ? `, runs over ${r.scopes} scopes` : ''}; ` +
    'Baton: submit → end, lifecycle included; raw: a publisher process, per token XADD + PUBLISH pipelined, a subscriber here',
  );
  const row = (c: StreamCost) => ({
    'Redis CPU µs/token': num(c.redisCpuUsPerToken, 1),
    'Redis cmds/token': num(c.commandsPerToken, 2),
    'tokens/event': num(c.tokensPerEvent, 2),
    [`one core: streams at ${num(TOKENS_PER_SEC, 0)} tok/s`]: num(streamsPerCore(c), 0),
    'reader p50 / p99 ms': `${num(c.latency.p50Ms, 2)} / ${num(c.latency.p99Ms, 2)}`,
    'worker (raw: publisher) CPU µs/token': num(c.writerCpuUs, 1),
    'API CPU µs/token': c.apiCpuUs === undefined ? '—' : num(c.apiCpuUs, 1),
    'readers (raw: subscriber) CPU µs/token': num(c.readerCpuUs, 1),
    'seconds per pass': c.seconds.map((x) => num(x, 1)).join(', '),
  });
  const byPass = (c: StreamCost) => c.redisCpuUsPerTokenByPass.map((x) => num(x, 1)).join(' / ');
  const rows: Record<string, Record<string, Cell>> = {};
  for (const { runs, raw, baton } of r.rows) {
    rows[`raw XADD + PUBLISH, ${runs} runs`] = row(raw);
    rows[`Baton, ${runs} runs`] = row(baton);
  }
  rows['raw XADD + PUBLISH, a lone run'] = row(r.lone.raw);
  rows['Baton, a lone run'] = row(r.lone.baton);
  printTable('layout', rows);
  for (const { runs, raw, baton } of [...r.rows, { runs: 1, ...r.lone }]) {
    console.log(
      `Baton / raw, ${runs === 1 ? 'a lone run' : `${runs} runs`}: Redis CPU per token ${ratio(baton.redisCpuUsPerToken, raw.redisCpuUsPerToken)}, ` +
      `commands per token ${ratio(baton.commandsPerToken, raw.commandsPerToken)}, ` +
      `reader p50 ${ratio(baton.latency.p50Ms, raw.latency.p50Ms, 1)}, p99 ${ratio(baton.latency.p99Ms, raw.latency.p99Ms, 1)}; ` +
      `Redis CPU µs/token by pass: raw ${byPass(raw)}, Baton ${byPass(baton)}`,
    );
  }
  console.log(
    `(${r.rounds} passes of each layout, pooled; raw's split before and after Baton's. A stream that falls behind its pace ` +
    'has its tokens coalesced (tokens/event above 1): fewer writes, so less CPU per token, and a latency that shows it)',
  );
  console.log(
    `(Redis idle: ${num(r.redisIdleCpuMsPerSec, 1)} ms of CPU per second, counted in every window: most of a lone run's ` +
    'Redis CPU per token, as the processes\' timers are most of its CPU per token)',
  );
  if (sharedRedisNote) console.log(`(${sharedRedisNote})`);
  if (PROFILE) printProfile(r);
  const l = r.long;
  console.log(
    `\nlong runs, read from outside over SSE: a ${LONG_STEPS}-step agent (each step memoized, a token each), then ${WAITS} waits ` +
    `each resumed at once; p50 of ${l.repeats} runs of each length, taken in turn`,
  );
  printTable('figure', {
    [`step-to-step gap, mean over ten steps, ${LONG_STEPS}-step run`]: {
      'baseline': `${num(l.firstTenGapMs, 2)} ms (first ten)`, 'measured': `${num(l.lastTenGapMs, 2)} ms (last ten)`,
      ratio: ratio(l.lastTenGapMs, l.firstTenGapMs),
    },
    [`resume → next step after the ${WAITS}th wait`]: {
      'baseline': `${num(l.tenthResumeMs.short, 2)} ms (${SHORT_STEPS} steps before)`, 'measured': `${num(l.tenthResumeMs.long, 2)} ms (${LONG_STEPS} steps before)`,
      ratio: ratio(l.tenthResumeMs.long, l.tenthResumeMs.short),
    },
    [`resume → next step, all ${WAITS} waits`]: {
      'baseline': `${num(l.anyResumeMs.short, 2)} ms (${SHORT_STEPS} steps before)`, 'measured': `${num(l.anyResumeMs.long, 2)} ms (${LONG_STEPS} steps before)`,
      ratio: ratio(l.anyResumeMs.long, l.anyResumeMs.short),
    },
  });
}

/** Where Redis's time per token goes, by command, at the largest N (BENCH_LLM_PROFILE=1). */
function printProfile(r: LlmStreamsBench): void {
  const { runs, raw, baton } = r.rows[r.rows.length - 1];
  const names = [...new Set([...raw.byCommand.keys(), ...baton.byCommand.keys()])]
    .sort((a, b) => (baton.byCommand.get(b)?.usec ?? 0) - (baton.byCommand.get(a)?.usec ?? 0));
  const cell = (c: { calls: number; usec: number } | undefined) => (c ? `${num(c.calls, 3)} / ${num(c.usec, 2)}` : '—');
  console.log(`\nRedis commands per token at ${runs} runs (calls / µs, from INFO commandstats; a function's inner commands also counted in fcall)`);
  printTable('command', Object.fromEntries(names.slice(0, 16).map((n) => [n, { raw: cell(raw.byCommand.get(n)), Baton: cell(baton.byCommand.get(n)) }])));
}

/** The goal rows (`r` undefined: why there are no figures). */
export interface LlmGoalRow { raw?: Cell; baton: Cell; ratio?: Cell; goal: Cell; met?: boolean }

export function llmGoalRows(r: LlmStreamsBench | { why: string }): Record<string, LlmGoalRow> {
  const cpuGoal = `≤ ${LLM_GOALS.cpuVsRaw.toFixed(1)}× raw`;
  const labels: [string, string][] = [
    ...LLM_RUNS.map((n): [string, string] => [`Redis CPU µs per streamed token, ${n} LLM-paced runs, lifecycle included`, cpuGoal]),
    ...LLM_RUNS.flatMap((n): [string, string][] => [
      [`reader p50 ms, ${n} runs`, `≤ raw + ${LLM_GOALS.p50OverRawMs} ms`],
      [`reader p99 ms (emit → reader), ${n} runs`, `≤ raw + ${LLM_GOALS.p99OverRawMs} ms`],
    ]),
    ['token → reader p50 ms, a lone run', `≤ ${LLM_GOALS.loneP50VsRaw}× raw`],
  ];
  if ('why' in r) return Object.fromEntries(labels.map(([label, goal]) => [label, { baton: `n/a (${r.why})`, goal }]));
  const within = (a: number | undefined, b: number | undefined, max: number) =>
    (a === undefined || b === undefined || !Number.isFinite(a / b) ? undefined : a / b <= max);
  const plus = (a: number | undefined, b: number | undefined, ms: number) =>
    (a === undefined || b === undefined ? undefined : a <= b + ms);
  /** Raw's and Baton's figures with `digits` decimals, and their ratio. */
  const pair = (raw: number | undefined, baton: number | undefined, digits = 1, ratioDigits = 2) =>
    ({ raw: num(raw, digits), baton: num(baton, digits), ratio: ratio(baton, raw, ratioDigits) });
  const rows: Record<string, LlmGoalRow> = {};
  for (const { runs, raw, baton } of r.rows) {
    rows[`Redis CPU µs per streamed token, ${runs} LLM-paced runs, lifecycle included`] = {
      ...pair(raw.redisCpuUsPerToken, baton.redisCpuUsPerToken),
      goal: cpuGoal, met: within(baton.redisCpuUsPerToken, raw.redisCpuUsPerToken, LLM_GOALS.cpuVsRaw),
    };
  }
  for (const { runs, raw, baton } of r.rows) {
    rows[`Redis commands per token, ${runs} runs`] = { ...pair(raw.commandsPerToken, baton.commandsPerToken, 2), goal: 'print' };
    rows[`concurrent ${num(TOKENS_PER_SEC, 0)}-tokens/s streams one Redis core carries, ${runs} runs`] = {
      ...pair(streamsPerCore(raw), streamsPerCore(baton), 0), goal: 'print',
    };
    rows[`CPU µs per token, worker process (raw: publisher), ${runs} runs`] = { ...pair(raw.writerCpuUs, baton.writerCpuUs), goal: 'print' };
    rows[`CPU µs per token, API process (raw: none; readers / subscriber beside), ${runs} runs`] = {
      raw: `— (${num(raw.readerCpuUs, 1)})`, baton: `${num(baton.apiCpuUs, 1)} (${num(baton.readerCpuUs, 1)})`, goal: 'print',
    };
    rows[`reader p50 ms, ${runs} runs`] = {
      ...pair(raw.latency.p50Ms, baton.latency.p50Ms, 2, 1),
      goal: `≤ raw + ${LLM_GOALS.p50OverRawMs} ms`, met: plus(baton.latency.p50Ms, raw.latency.p50Ms, LLM_GOALS.p50OverRawMs),
    };
    rows[`reader p99 ms (emit → reader), ${runs} runs`] = {
      ...pair(raw.latency.p99Ms, baton.latency.p99Ms, 2, 1),
      goal: `≤ raw + ${LLM_GOALS.p99OverRawMs} ms`, met: plus(baton.latency.p99Ms, raw.latency.p99Ms, LLM_GOALS.p99OverRawMs),
    };
  }
  const lone = r.lone;
  rows['token → reader p50 ms, a lone run'] = {
    ...pair(lone.raw.latency.p50Ms, lone.baton.latency.p50Ms, 2, 1),
    goal: `≤ ${LLM_GOALS.loneP50VsRaw}× raw`, met: within(lone.baton.latency.p50Ms, lone.raw.latency.p50Ms, LLM_GOALS.loneP50VsRaw),
  };
  const l = r.long;
  rows[`step gap ms, last ten of ${LONG_STEPS} steps (first ten as baseline)`] = {
    ...pair(l.firstTenGapMs, l.lastTenGapMs, 2),
    goal: `flat (≤ ${LLM_GOALS.flat}×)`, met: within(l.lastTenGapMs, l.firstTenGapMs, LLM_GOALS.flat),
  };
  rows[`resume → next step ms after ${WAITS} waits, ${LONG_STEPS} steps before (${SHORT_STEPS} as baseline)`] = {
    ...pair(l.tenthResumeMs.short, l.tenthResumeMs.long, 2),
    goal: `flat (≤ ${LLM_GOALS.flat}×)`, met: within(l.tenthResumeMs.long, l.tenthResumeMs.short, LLM_GOALS.flat),
  };
  return rows;
}

/** Prints the streaming goals table, as run.ts prints the lifecycle's. */
export function printLlmGoals(r: LlmStreamsBench | { why: string }): void {
  console.log('\nstreaming goals, each next to its baseline measured in this run');
  printTable('figure', Object.fromEntries(Object.entries(llmGoalRows(r)).map(([label, g]) => [label, {
    'raw baseline': g.raw ?? '—', Baton: g.baton, ratio: g.ratio ?? '', goal: g.goal, 'meets goal': g.met === undefined ? '' : g.met ? 'yes' : 'no',
  }])));
}

async function main(): Promise<void> {
  const t0 = performance.now();
  console.log(
    `machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}; ` +
    `BENCH_LLM_RUNS ${LLM_RUNS.join(',')}, BENCH_LLM_TOKENS ${LLM_TOKENS}, BENCH_LLM_TOKEN_MS ${LLM_TOKEN_MS}`,
  );
  await withBenchRedis(async (redisUrl) => {
    const r = await benchLlmStreams(redisUrl);
    printLlmStreams(r);
    printLlmGoals(r);
  });
  console.log(`\nbench took ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
