import { defineAgent } from '../src/lib/sdk/agent.ts';

/**
 * Agents of the benchmarks, used by in-process workers and loaded by spawned ones
 * (`baton worker --agents bench/bench-agents.ts`). Each takes its parameters from the
 * run's metadata, so a bench decides them per run without restarting a worker.
 */

/** Wall-clock milliseconds with sub-ms precision, comparable across processes of one machine. */
export const wallMs = () => performance.timeOrigin + performance.now();

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  const t = setTimeout(done, ms);
  function done() { clearTimeout(t); signal?.removeEventListener('abort', done); resolve(); }
  signal?.addEventListener('abort', done, { once: true });
});

/**
 * Waits `startDelayMs` first (readers connect meanwhile), then
 * `latency` (default): `tokens` tokens, one every `intervalMs`, each the emit time followed
 * by `|`, so a reader in any process can tell how long a token took to reach it;
 * `fast`: `tokens` tokens of 4 characters as fast as the agent can emit them.
 */
export const streamer = defineAgent({
  name: 'bench-streamer',
  async run(ctx) {
    const tokens = Number(ctx.metadata.tokens ?? 100);
    if (ctx.metadata.startDelayMs) await sleep(Number(ctx.metadata.startDelayMs), ctx.signal);
    if (ctx.metadata.mode === 'fast') {
      for (let i = 0; i < tokens; i++) {
        ctx.emit('tok ');
        if (i % 100 === 99) await new Promise((r) => setImmediate(r));
      }
      return 'done';
    }
    const interval = Number(ctx.metadata.intervalMs ?? 10);
    const start = wallMs();
    for (let i = 0; i < tokens; i++) {
      // Keep the schedule (not drift): token i is due at start + i * interval.
      const due = start + i * interval;
      if (due > wallMs()) await sleep(due - wallMs());
      ctx.emit(`${wallMs().toFixed(3)}|`);
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
