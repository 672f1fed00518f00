import { cpus } from 'node:os';
import { benchChatStream, printChatStream } from './chat-stream.ts';
import { benchOpenAiStreams, printOpenAiStreams } from './openai-streams.ts';
import { benchBaton, benchRawBullmq, httpFleet, type Throughput } from './e2e.ts';
import { BURST, benchFirstToken, printFirstToken, type FirstTokenBench } from './first-token.ts';
import { benchRecovery, printRecovery, type RecoveryBench } from './recovery.ts';
import { benchReplicaAcks, printReplicaAcks } from './replica-acks.ts';
import { benchTracingCost, printTracingCost } from './tracing-cost.ts';
import { sharedRedisNote, withBenchRedis } from './redis-stats.ts';
import { benchHostile, printHostile } from './hostile.ts';
import { benchLibraryCost, printLibraryCost } from './library-cost.ts';
import { benchLlmStreams, printLlmGoals, printLlmStreams } from './llm-streams.ts';
import { benchSessionLength, printSessionLength, type SessionLengthRow } from './session-length.ts';
import { SMALL_YOUNG_GENERATION, SSE_CLIENTS, SSE_HOLD_MS, STALLED_READERS, benchSseMemory, printSseMemory, sseMemoryUnavailable, type SseMemoryBench } from './sse-memory.ts';
import { STREAM_RUNS, benchStreams, printStreams, type StreamBench } from './streams.ts';
import { num, printTable, ratio, type Cell } from './table.ts';
import { benchTransitions, printTransitions, type TransitionCosts } from './transitions.ts';

/**
 * `npm run bench`: every figure is measured in this run against one Redis, so ratios compare
 * like with like on whatever machine runs it; the last tables put each figure of issue 18's
 * and issue 32's goals next to its baseline and its goal. Uses REDIS_URL when set, else its own
 * redis-server (no persistence) on a free port. Knobs (docs/benchmarks.md):
 *   BENCH_RUNS (2000) runs per throughput row, BENCH_WARMUP (200) unmeasured runs before each,
 *   BENCH_ONLY=<section,...> runs only those sections, BENCH_SKIP_SLOW=1 skips the recovery
 *   row (about 20 s of waiting with the default lease), and the per-section ones in their files.
 */
const RUNS = Number(process.env.BENCH_RUNS ?? 2000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);
const CONCURRENCY = 50;
const SCALE_OUT = [1, 2, 4];

/** Issue 18's goals: the numbers the figures are held to. */
const GOALS = {
  commandsPerRun: 64,
  claimCommands: 12,
  finishCommands: 15,
  heartbeatCommandsPerRun: 2,
  engineVsRaw: 0.5,
  httpVsRaw: 0.35,
  streamP50Ms: 5,
  streamP99Ms: 20,
  loneP50Ms: 2,
  firstTokenVsRaw: 3,
  sseRssMiB: 120,
  recoverySeconds: 8,
  /** "Flat": the bench's reading, with room for the noise of a shared machine. */
  claimGrowth: 1.5,
};

const SECTIONS = [
  'throughput', 'transitions', 'library', 'session-length', 'streams', 'chat-stream', 'openai-streams', 'llm-streams', 'first-token', 'sse-memory', 'recovery',
  'replica-acks', 'tracing', 'hostile',
] as const;
type Section = (typeof SECTIONS)[number];
const only = process.env.BENCH_ONLY?.split(',').map((s) => s.trim()).filter(Boolean);
for (const s of only ?? []) if (!(SECTIONS as readonly string[]).includes(s)) throw new Error(`BENCH_ONLY: unknown section "${s}" (sections: ${SECTIONS.join(', ')})`);
const skipSlow = process.env.BENCH_SKIP_SLOW === '1';

/** A figure, or why there is none. */
type Outcome<T> = { ok: true; value: T } | { ok: false; why: string };

/** Runs a section unless it is left out; a section that fails is reported, the others still run. */
async function section<T>(name: Section, run: () => Promise<T>, print: (t: T) => void, unavailable?: string): Promise<Outcome<T>> {
  if (only && !only.includes(name)) return { ok: false, why: `not run: BENCH_ONLY=${only.join(',')}` };
  if (unavailable) return { ok: false, why: unavailable };
  try {
    const value = await run();
    print(value);
    return { ok: true, value };
  } catch (err) {
    const why = (err as Error).message.split('\n')[0];
    console.log(`\n${name}: failed: ${(err as Error).stack ?? why}`);
    return { ok: false, why: `${name} failed: ${why}` };
  }
}

interface ThroughputRows { raw: Throughput; engine: Throughput; httpOneProcess: Throughput; fleet: Map<number, Throughput> }

async function throughput(redisUrl: string): Promise<ThroughputRows> {
  const o = { runs: RUNS, warmup: WARMUP, concurrency: CONCURRENCY };
  const raw = await benchRawBullmq(redisUrl, o);
  const engine = await benchBaton(redisUrl, { ...o, viaHttp: false });
  const httpOneProcess = await benchBaton(redisUrl, { ...o, viaHttp: true });
  const fleet = new Map<number, Throughput>();
  const f = await httpFleet(redisUrl, CONCURRENCY);
  try {
    for (const workers of SCALE_OUT) {
      await f.scaleTo(workers);
      fleet.set(workers, await f.measure(o));
    }
  } finally {
    await f.close();
  }
  return { raw, engine, httpOneProcess, fleet };
}

/** Runs/s one Redis core could carry if Redis did nothing but this: 1 s / its CPU per run. */
const ceiling = (t: Throughput) => (t.cpuUsPerRun ? 1e6 / t.cpuUsPerRun : undefined);

function printThroughput(r: ThroughputRows): void {
  console.log(`\nend to end: submit → echo agent → succeeded (history commit included), ${RUNS} runs after ${WARMUP} unmeasured, 50 submits in flight`);
  const row = (t: Throughput) => ({
    'runs/s': Math.round(t.runsPerSec),
    'vs raw': ratio(t.runsPerSec, r.raw.runsPerSec),
    'Redis cmds/run': num(t.commandsPerRun),
    'Redis CPU µs/run': num(t.cpuUsPerRun, 0),
    'one-core ceiling runs/s': num(ceiling(t), 0),
    seconds: num(t.seconds, 2),
  });
  printTable('path', {
    'raw BullMQ (add + no-op job, worker in this process)': row(r.raw),
    'Baton engine (Submissions.submit, worker in this process, no HTTP)': row(r.engine),
    'Baton HTTP, API and worker in this process': row(r.httpOneProcess),
    ...Object.fromEntries([...r.fleet].map(([n, t]) => [`Baton HTTP, API process + ${n} worker process${n > 1 ? 'es' : ''}`, row(t)])),
  });
  console.log(`(${cpus().length} cores: worker processes beyond the cores only add contention; the one-core ceiling is 1 s / Redis CPU per run)`);
  if (sharedRedisNote) console.log(`(${sharedRedisNote})`);
}

/** Issue 18's goals, each next to its baseline from this run. */
interface GoalRow { raw?: Cell; baton: Cell; ratio?: Cell; goal: Cell; met?: boolean }

function goals(
  tp: Outcome<ThroughputRows>, tr: Outcome<TransitionCosts>, sl: Outcome<SessionLengthRow[]>, st: Outcome<StreamBench>,
  ft: Outcome<FirstTokenBench>, sm: Outcome<SseMemoryBench>, rc: Outcome<RecoveryBench>,
): Record<string, GoalRow> {
  const rows: Record<string, GoalRow> = {};
  /** Fills `label` from `o` when it was measured, else says why not. */
  const add = <T>(label: string, o: Outcome<T>, goal: string, fill: (v: T) => Omit<GoalRow, 'goal'>) => {
    rows[label] = o.ok ? { ...fill(o.value), goal } : { baton: `n/a (${o.why})`, goal };
  };
  const atMost = (x: number | undefined, max: number) => (x === undefined || !Number.isFinite(x) ? undefined : x <= max);
  const atLeast = (x: number | undefined, min: number) => (x === undefined || !Number.isFinite(x) ? undefined : x >= min);
  const http1 = (v: ThroughputRows) => v.fleet.get(1)!;

  add('Redis commands per run, engine (echo, history commit included)', tp, `≤ ${GOALS.commandsPerRun}`, (v) => ({
    raw: num(v.raw.commandsPerRun), baton: num(v.engine.commandsPerRun), ratio: ratio(v.engine.commandsPerRun, v.raw.commandsPerRun),
    met: atMost(v.engine.commandsPerRun, GOALS.commandsPerRun),
  }));
  add('Redis commands per run, HTTP (API and worker processes)', tp, `≤ ${GOALS.commandsPerRun}`, (v) => ({
    raw: num(v.raw.commandsPerRun), baton: num(http1(v).commandsPerRun), ratio: ratio(http1(v).commandsPerRun, v.raw.commandsPerRun),
    met: atMost(http1(v).commandsPerRun, GOALS.commandsPerRun),
  }));
  add('Redis commands, claim', tr, `≤ ${GOALS.claimCommands}`, (v) => ({ baton: v.claim.commands, met: atMost(v.claim.commands, GOALS.claimCommands) }));
  add('Redis commands, finish', tr, `≤ ${GOALS.finishCommands}`, (v) => ({ baton: v.finish.commands, met: atMost(v.finish.commands, GOALS.finishCommands) }));
  add('Redis commands, heartbeat per run held', tr, `≤ ${GOALS.heartbeatCommandsPerRun}`, (v) => {
    const perRun = v.heartbeat.commands / v.heartbeat.held;
    return { baton: num(perRun), met: atMost(perRun, GOALS.heartbeatCommandsPerRun) };
  });
  add('Redis CPU µs per run, engine', tp, 'print', (v) => ({
    raw: num(v.raw.cpuUsPerRun, 0), baton: num(v.engine.cpuUsPerRun, 0), ratio: ratio(v.engine.cpuUsPerRun, v.raw.cpuUsPerRun),
  }));
  add('Redis CPU µs per run, HTTP (API and worker processes)', tp, 'print', (v) => ({
    raw: num(v.raw.cpuUsPerRun, 0), baton: num(http1(v).cpuUsPerRun, 0), ratio: ratio(http1(v).cpuUsPerRun, v.raw.cpuUsPerRun),
  }));
  add('runs/s, engine (no HTTP)', tp, `≥ ${GOALS.engineVsRaw}× raw`, (v) => ({
    raw: Math.round(v.raw.runsPerSec), baton: Math.round(v.engine.runsPerSec), ratio: ratio(v.engine.runsPerSec, v.raw.runsPerSec),
    met: atLeast(v.engine.runsPerSec / v.raw.runsPerSec, GOALS.engineVsRaw),
  }));
  add('runs/s, HTTP (API and worker processes)', tp, `≥ ${GOALS.httpVsRaw}× raw`, (v) => ({
    raw: Math.round(v.raw.runsPerSec), baton: Math.round(http1(v).runsPerSec), ratio: ratio(http1(v).runsPerSec, v.raw.runsPerSec),
    met: atLeast(http1(v).runsPerSec / v.raw.runsPerSec, GOALS.httpVsRaw),
  }));
  for (const n of SCALE_OUT) {
    add(`runs/s, HTTP, ${n} worker process${n > 1 ? 'es' : ''} (Redis CPU/run → one-core ceiling)`, tp, 'print', (v) => {
      const t = v.fleet.get(n)!;
      const cell = (x: Throughput) => `${Math.round(x.runsPerSec)} (${num(x.cpuUsPerRun, 0)} µs → ${num(ceiling(x), 0)}/s)`;
      return { raw: cell(v.raw), baton: cell(t), ratio: ratio(t.runsPerSec, v.raw.runsPerSec) };
    });
  }
  const ms = (x: number) => num(x, 2);
  add(`emit → client p50 ms, ${STREAM_RUNS} runs × a token per 10 ms, readers apart`, st, `≤ ${GOALS.streamP50Ms} ms`, (v) => ({
    raw: ms(v.apart.raw.p50Ms), baton: ms(v.apart.baton.p50Ms), ratio: ratio(v.apart.baton.p50Ms, v.apart.raw.p50Ms, 1),
    met: atMost(v.apart.baton.p50Ms, GOALS.streamP50Ms),
  }));
  add('emit → client p99 ms, same', st, `≤ ${GOALS.streamP99Ms} ms`, (v) => ({
    raw: ms(v.apart.raw.p99Ms), baton: ms(v.apart.baton.p99Ms), ratio: ratio(v.apart.baton.p99Ms, v.apart.raw.p99Ms, 1),
    met: atMost(v.apart.baton.p99Ms, GOALS.streamP99Ms),
  }));
  add('emit → client p50 / p99 ms, same, all in one process', st, 'print', (v) => ({
    raw: `${ms(v.oneProcess.raw.p50Ms)} / ${ms(v.oneProcess.raw.p99Ms)}`, baton: `${ms(v.oneProcess.baton.p50Ms)} / ${ms(v.oneProcess.baton.p99Ms)}`,
    ratio: `${ratio(v.oneProcess.baton.p50Ms, v.oneProcess.raw.p50Ms, 1)} / ${ratio(v.oneProcess.baton.p99Ms, v.oneProcess.raw.p99Ms, 1)}`,
  }));
  add('token → reader p50 ms, a lone run, readers apart', st, `≤ ${GOALS.loneP50Ms} ms`, (v) => ({
    raw: ms(v.lone.raw.p50Ms), baton: ms(v.lone.baton.p50Ms), ratio: ratio(v.lone.baton.p50Ms, v.lone.raw.p50Ms, 1),
    met: atMost(v.lone.baton.p50Ms, GOALS.loneP50Ms),
  }));
  add('time to first token p50 ms, one session (submitAndStream: one request)', ft, `≤ ${GOALS.firstTokenVsRaw}× raw`, (v) => ({
    raw: ms(v.raw.oneMs), baton: ms(v.baton.oneMs), ratio: ratio(v.baton.oneMs, v.raw.oneMs, 1),
    met: atMost(v.baton.oneMs / v.raw.oneMs, GOALS.firstTokenVsRaw),
  }));
  add(`time to first token p50 ms, ${BURST} sessions at once`, ft, `≤ ${GOALS.firstTokenVsRaw}× raw`, (v) => ({
    raw: ms(v.raw.burstMs), baton: ms(v.baton.burstMs), ratio: ratio(v.baton.burstMs, v.raw.burstMs, 1),
    met: atMost(v.baton.burstMs / v.raw.burstMs, GOALS.firstTokenVsRaw),
  }));
  const otherWays = [
    ['submit then stream (two requests)', 'batonTwoRequests'],
    ['the typed client over fetch', 'batonFetch'],
    ['node:http instead of the typed client', 'batonBareHttp'],
  ] as const;
  for (const [label, way] of otherWays) {
    add(`time to first token p50 ms, one session / 50 at once, ${label}`, ft, 'print', (v) => ({
      raw: `${ms(v.raw.oneMs)} / ${ms(v.raw.burstMs)}`, baton: `${ms(v[way].oneMs)} / ${ms(v[way].burstMs)}`,
      ratio: `${ratio(v[way].oneMs, v.raw.oneMs, 1)} / ${ratio(v[way].burstMs, v.raw.burstMs, 1)}`,
    }));
  }
  add(`API RSS MiB, ${SSE_CLIENTS} SSE clients connected, compiled API (idle as baseline)`, sm, `≤ ${GOALS.sseRssMiB} MiB`, (v) => ({
    raw: num(v.compiled.idleMiB, 0), baton: num(v.compiled.connectedMiB, 0), ratio: ratio(v.compiled.connectedMiB, v.compiled.idleMiB),
    met: atMost(v.compiled.connectedMiB, GOALS.sseRssMiB),
  }));
  add(`API RSS MiB, same, least over the ${SSE_HOLD_MS / 1000} s after (every client connected)`, sm, 'print', (v) => ({
    raw: num(v.compiled.idleMiB, 0), baton: v.compiled.held ? num(v.compiled.held.minMiB, 0) : 'n/a',
    ratio: v.compiled.held ? ratio(v.compiled.held.minMiB, v.compiled.idleMiB) : '',
  }));
  const otherApis = [
    ['API run from the sources through tsx', 'sources'],
    [`compiled API with NODE_OPTIONS=${SMALL_YOUNG_GENERATION}`, 'smallYoung'],
  ] as const;
  for (const [label, api] of otherApis) {
    add(`API RSS MiB, same, ${label}`, sm, 'print', (v) => ({
      raw: num(v[api].idleMiB, 0), baton: num(v[api].connectedMiB, 0), ratio: ratio(v[api].connectedMiB, v[api].idleMiB),
    }));
  }
  add(`API memory per reader, ${STALLED_READERS} readers that never read a finished 6 MB log (64 KiB events), compiled API`, sm, 'print', (v) => {
    const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
    const st = v.stalled;
    return {
      baton: `${kib(st.heldPerReader)} held as counted (most ${kib(st.mostHeld)}); heap ${kib(st.heapPerReader)} + external ${kib(st.externalPerReader)}; ` +
        `RSS +${st.rssAt5sMiB.toFixed(0)} MiB at 5 s, +${st.rssPeakMiB.toFixed(0)} MiB peak; ${kib(st.readPerReader)} read from Redis each`,
    };
  });
  add('worker SIGKILLed → runs recovered, s, default settings', rc, `≤ ${GOALS.recoverySeconds} s`, (v) => {
    const worst = Math.max(...v.seconds);
    return { baton: `${v.seconds.map((s) => s.toFixed(1)).join(', ')} (worst ${worst.toFixed(1)})`, met: atMost(worst, GOALS.recoverySeconds) };
  });
  const bySize = (v: SessionLengthRow[], turns: number) => v.find((r) => r.turns === turns)!;
  add('claim ms, 10,000-turn session (1,000 turns as baseline)', sl, `flat (≤ ${GOALS.claimGrowth}×)`, (v) => {
    const [a, b] = [bySize(v, 1_000).claimMs, bySize(v, 10_000).claimMs];
    return { raw: a.toFixed(2), baton: b.toFixed(2), ratio: ratio(b, a), met: atMost(b / a, GOALS.claimGrowth) };
  });
  add('claim bytes read, 10,000-turn session (1,000 turns as baseline)', sl, `flat (≤ ${GOALS.claimGrowth}×)`, (v) => {
    const [a, b] = [bySize(v, 1_000).replyBytes, bySize(v, 10_000).replyBytes];
    return { raw: a, baton: b, ratio: ratio(b, a), met: atMost(b / a, GOALS.claimGrowth) };
  });
  return rows;
}

async function main(redisUrl: string): Promise<void> {
  const t0 = performance.now();
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}; BENCH_RUNS ${RUNS}, worker concurrency ${CONCURRENCY}`);
  const tp = await section('throughput', () => throughput(redisUrl), printThroughput);
  const tr = await section('transitions', () => benchTransitions(redisUrl), (t) => printTransitions(t, { claim: GOALS.claimCommands, finish: GOALS.finishCommands, heartbeat: GOALS.heartbeatCommandsPerRun }));
  await section('library', () => benchLibraryCost(redisUrl), printLibraryCost);
  const sl = await section('session-length', () => benchSessionLength(redisUrl), printSessionLength);
  const st = await section('streams', () => benchStreams(redisUrl), printStreams);
  await section('chat-stream', () => benchChatStream(redisUrl), printChatStream);
  await section('openai-streams', () => benchOpenAiStreams(redisUrl), printOpenAiStreams);
  const llm = await section('llm-streams', () => benchLlmStreams(redisUrl), printLlmStreams);
  const ft = await section('first-token', () => benchFirstToken(redisUrl), printFirstToken);
  const sm = await section('sse-memory', () => benchSseMemory(redisUrl), printSseMemory, sseMemoryUnavailable());
  const rc = await section('recovery', () => benchRecovery(redisUrl), printRecovery, skipSlow ? 'skipped: BENCH_SKIP_SLOW=1' : undefined);
  // Its own primary and replica: what replication costs, whatever Redis the rest used.
  await section('replica-acks', benchReplicaAcks, printReplicaAcks);
  await section('tracing', () => benchTracingCost(redisUrl), printTracingCost);
  await section('hostile', () => benchHostile(redisUrl), printHostile);

  console.log('\nissue 18 goals, each next to its baseline measured in this run');
  const rows = goals(tp, tr, sl, st, ft, sm, rc);
  printTable('figure', Object.fromEntries(Object.entries(rows).map(([label, r]) => [label, {
    'raw baseline': r.raw ?? '—', Baton: r.baton, ratio: r.ratio ?? '', goal: r.goal, 'meets goal': r.met === undefined ? '' : r.met ? 'yes' : 'no',
  }])));
  printLlmGoals(llm.ok ? llm.value : { why: llm.why });
  console.log(`\nbench took ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}

await withBenchRedis(main);
