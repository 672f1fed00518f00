import { readFile } from 'node:fs/promises';
import { defineAgent } from '../src/lib/sdk/agent.ts';

/**
 * Agents of the benchmarks, used by in-process workers and loaded by spawned ones
 * (`baton worker --agents bench/bench-agents.ts`). Each takes its parameters from the
 * run's metadata, so a bench decides them per run without restarting a worker.
 */

/**
 * Milliseconds of the machine's monotonic clock (CLOCK_MONOTONIC on Linux), to a fraction of
 * a µs: one clock for every process of a machine, so an emit time stamped in a worker and an
 * arrival stamped in a reader compare exactly. Not `performance.timeOrigin + performance.now()`:
 * that is the wall clock as each process read it when it started, and two processes started
 * either side of a clock adjustment disagree by it (readers apart once measured tokens
 * arriving 2.8 ms before they were emitted).
 */
export const clockMs = () => Number(process.hrtime.bigint()) / 1e6;

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  const t = setTimeout(done, ms);
  function done() { clearTimeout(t); signal?.removeEventListener('abort', done); resolve(); }
  signal?.addEventListener('abort', done, { once: true });
});

/** The emit time as a token: a reader in any process can tell how long it took to reach it. */
const stamp = () => `${clockMs().toFixed(3)}|`;

/** How long a run waits for its go file before it gives up (and fails). */
const GO_TIMEOUT_MS = 120_000;
const goTimes = new Map<string, Promise<number>>();

/**
 * The time (clockMs) written in `file` once it appears. Every run of a worker waiting on
 * one file shares one poll, so a thousand waiting runs cost one read every 10 ms.
 */
function goTime(file: string): Promise<number> {
  let at = goTimes.get(file);
  if (!at) {
    at = (async () => {
      const until = Date.now() + GO_TIMEOUT_MS;
      while (Date.now() < until) {
        const text = await readFile(file, 'utf8').catch(() => '');
        if (text.trim() !== '') return Number(text);
        await sleep(10);
      }
      throw new Error(`no go file ${file} after ${GO_TIMEOUT_MS / 1000} s`);
    })();
    goTimes.set(file, at);
  }
  return at;
}

/**
 * Waits first, so every reader is connected when tokens flow: `startDelayMs`, or, with
 * `goFile`, until the bench writes a time (clockMs) into that file (it does once every
 * reader has seen its run running), then until that time plus `phaseMs`. A file, not
 * Redis, so the bench's figures of Redis's work count nothing of the coordination. Then
 * `latency` (default): `tokens` tokens, one every `intervalMs`, each the emit time followed
 * by `|`; `fast`: `tokens` tokens of 4 characters as fast as the agent can emit them;
 * `large`: `tokens` tokens of `chars` characters, 2 ms apart.
 */
export const streamer = defineAgent({
  name: 'bench-streamer',
  async run(ctx) {
    const tokens = Number(ctx.metadata.tokens ?? 100);
    if (ctx.metadata.startDelayMs) await sleep(Number(ctx.metadata.startDelayMs), ctx.signal);
    if (typeof ctx.metadata.goFile === 'string') {
      const due = (await goTime(ctx.metadata.goFile)) + Number(ctx.metadata.phaseMs ?? 0);
      if (due > clockMs()) await sleep(due - clockMs(), ctx.signal);
    }
    if (ctx.metadata.mode === 'large') {
      // `tokens` emits of `chars` characters each: a log of large events (64 Ki characters is
      // the largest a token event gets), for what readers of a large replay cost.
      const piece = 'z'.repeat(Number(ctx.metadata.chars ?? 65_536));
      for (let i = 0; i < tokens; i++) {
        ctx.emit(piece);
        await sleep(2);
      }
      return 'done';
    }
    if (ctx.metadata.mode === 'fast') {
      for (let i = 0; i < tokens; i++) {
        ctx.emit('tok ');
        if (i % 100 === 99) await new Promise((r) => setImmediate(r));
      }
      return 'done';
    }
    const interval = Number(ctx.metadata.intervalMs ?? 10);
    const start = clockMs();
    for (let i = 0; i < tokens; i++) {
      // Keep the schedule (not drift): token i is due at start + i * interval.
      const due = start + i * interval;
      if (due > clockMs()) await sleep(due - clockMs());
      ctx.emit(stamp());
    }
    return 'done';
  },
});

/**
 * A long agent: `steps` memoized steps, each emitting its start time as a token, then
 * `waits` waits (`wait:w<k>:1`), each followed by a memoized step that emits its start
 * time: from outside, the gaps between the first steps' tokens show what a step costs, and
 * a resume's latency is from the resume request to the token of the step after the wait.
 * A resume runs the agent again from the top: the steps before the wait return their memo.
 */
export const longRun = defineAgent({
  name: 'bench-long',
  async run(ctx) {
    const steps = Number(ctx.metadata.steps ?? 300);
    const waits = Number(ctx.metadata.waits ?? 0);
    for (let i = 0; i < steps; i++) {
      await ctx.step(`s${i}`, () => {
        ctx.emit(stamp());
        return i;
      });
    }
    for (let w = 1; w <= waits; w++) {
      await ctx.waitFor(`w${w}`);
      await ctx.step(`after-w${w}`, () => {
        ctx.emit(stamp());
        return w;
      });
    }
    return 'done';
  },
});

/** Holds its run for `holdMs` (or until the run's signal aborts), then answers: a run to kill a worker under. */
export const hold = defineAgent({
  name: 'bench-hold',
  async run(ctx) {
    await sleep(Number(ctx.metadata.holdMs ?? 60_000), ctx.signal);
    return 'held';
  },
});
