/**
 * What tracing costs end to end: the HTTP row (API and worker in this process, echo agent, 50
 * submits in flight) with no tracing SDK registered, and with one registered in this process
 * that keeps every span in memory (the SDK's in-memory exporter behind a batching processor,
 * as a deployment's exporter would sit: spans are made and ended, only the network is left
 * out). Off and on take turns, twice each, on the bench's Redis.
 *
 *   node --import tsx bench/tracing-cost.ts
 *
 * Knobs: BENCH_TRACE_RUNS (1500), BENCH_TRACE_WARMUP (300).
 */
import { trace } from '@opentelemetry/api';
import { BatchSpanProcessor, InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { benchBaton, type Throughput } from './e2e.ts';
import { percentileOf, withBenchRedis } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

const RUNS = Number(process.env.BENCH_TRACE_RUNS ?? 1500);
const WARMUP = Number(process.env.BENCH_TRACE_WARMUP ?? 300);
const ROUNDS = 2;

interface TraceRow { throughput: Throughput[]; latencies: number[]; spans: number }
export interface TracingCostBench { off: TraceRow; on: TraceRow }

/** Runs `fn` with an SDK registered globally, unregistered after; returns what it returned and the spans made. */
async function traced<T>(fn: () => Promise<T>): Promise<{ value: T; spans: number }> {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 100_000 })] });
  trace.setGlobalTracerProvider(provider);
  try {
    const value = await fn();
    await provider.forceFlush();
    return { value, spans: exporter.getFinishedSpans().length };
  } finally {
    await provider.shutdown();
    trace.disable();
  }
}

export async function benchTracingCost(redisUrl: string): Promise<TracingCostBench> {
  const off: TraceRow = { throughput: [], latencies: [], spans: 0 };
  const on: TraceRow = { throughput: [], latencies: [], spans: 0 };
  const row = async (into: TraceRow) => {
    const latencies: number[] = [];
    const t = await benchBaton(redisUrl, { runs: RUNS, warmup: WARMUP, concurrency: 50, viaHttp: true, latencies });
    into.throughput.push(t);
    into.latencies.push(...latencies.slice(-RUNS));
  };
  for (let round = 0; round < ROUNDS; round++) {
    await row(off);
    on.spans += (await traced(() => row(on))).spans;
  }
  return { off, on };
}

export function printTracingCost(r: TracingCostBench): void {
  console.log(
    `\ntracing: HTTP end to end (API and worker in this process, echo agent, 50 submits in flight), ${RUNS} runs after ${WARMUP}; ` +
    `off (no SDK) and on (an SDK in this process, every span kept in memory), ${ROUNDS} passes each, in turn`,
  );
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const perSec = (x: TraceRow) => mean(x.throughput.map((t) => t.runsPerSec));
  // Spans are counted over every run of the pass, the warm-up's too.
  const runs = (x: TraceRow) => x.throughput.reduce((n, t) => n + t.runs + WARMUP, 0);
  const cells = (x: TraceRow) => ({
    'runs/s': num(perSec(x), 0),
    'by pass': x.throughput.map((t) => num(t.runsPerSec, 0)).join(', '),
    'vs off': ratio(perSec(x), perSec(r.off)),
    'submit → 202 p50 / p99 ms (50 in flight)': `${num(percentileOf(x.latencies, 50), 2)} / ${num(percentileOf(x.latencies, 99), 2)}`,
    'spans per run': x.spans ? num(x.spans / runs(x), 1) : '0',
  });
  printTable('tracing', { off: cells(r.off), on: cells(r.on) });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await withBenchRedis(async (url) => printTracingCost(await benchTracingCost(url)));
}
