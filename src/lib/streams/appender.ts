import type { Attempt } from '../transitions/attempt.ts';
import type { AppendAnswer, AppendItem } from '../transitions/append.ts';
import type { WorkerGateway } from '../transitions/attempt-gateway.ts';

/** Runs whose batches one call carries at most, and the bytes of their events (at least one batch). */
const MAX_RUNS_PER_CALL = 200;
const MAX_BYTES_PER_CALL = 1024 * 1024;
/** The process's tick, as a share of the widest window: a window's end is rounded up to it (atTick). */
const TICK_SHARE = 1 / 8;

interface Queued { item: AppendItem; bytes: number; resolve(a: AppendAnswer): void; reject(err: Error): void }

/**
 * How a run's token window (EventWriter's flushMs) widens with the runs this process streams:
 * the writer's own for a lone run, linearly up to `maxMs` once `fullAt` runs have writers open
 * (EMIT_FLUSH_MAX_MS, EMIT_FLUSH_FULL_AT). `maxMs` 0: it never widens.
 */
export interface Widening { maxMs: number; fullAt: number }

/**
 * Gathers the appends of one process's runs into one `append` call per scope: every run's
 * writer (src/lib/streams/writer.ts) hands its batch here, and a scope has at most one call
 * in flight; the batches that arrive meanwhile go in its next call, together. Batches made in
 * the same turn of the event loop share a call. A writer whose window is not over waits for
 * the first of the process's ticks at its end (atTick), not a timer of its own, so while many
 * runs stream, the batches of the runs whose windows end in one tick go in one call: the call's
 * own cost and its notification (one message for all of them) are shared, and a batch waits
 * for the others at most one tick past its window's end, in a steady stream not at all. Each
 * batch keeps its number and is applied once, so a call that fails is retried by each writer
 * as before.
 */
export class Appender {
  private readonly pending = new Map<string, Queued[]>();
  private readonly sending = new Set<string>();
  /** Calls made and batches they carried (the bench reports them). */
  calls = 0;
  batches = 0;
  /** Writers open in this process (one per attempt under way): how many runs may stream. */
  private writers = 0;
  /** The writers waiting for each tick (by its time), and its timer. */
  private readonly ticks = new Map<number, { wakes: Set<() => void>; timer: NodeJS.Timeout }>();
  /** The tick's length, ms (at least 1). */
  private readonly tickMs: number;

  constructor(
    private readonly transitions: Pick<WorkerGateway, 'appendMany'>,
    private readonly widening: Widening = { maxMs: 0, fullAt: 1 },
  ) {
    this.tickMs = Math.max(1, Math.round(widening.maxMs * TICK_SHARE));
  }

  /** A run's writer opened (EventWriter's constructor); `closed` when it takes no more events. */
  opened(): void {
    this.writers++;
  }

  closed(): void {
    this.writers--;
  }

  /**
   * The token window now, from a writer's own `minMs`: the more runs stream from this process, the more tokens each batch
   * carries, so a stream entry, an append's share and a notification serve several tokens
   * while Redis is busiest, and a lone run keeps the narrow window (docs/streams.md, Coalescing).
   */
  flushMs(minMs: number): number {
    const { maxMs } = this.widening;
    if (maxMs <= minMs) return minMs;
    return Math.round(minMs + (maxMs - minMs) * this.load(this.writers));
  }

  /**
   * Calls `wake` at the first tick at or after `at` (a writer's window end). Ticks are the
   * multiples of an eighth of the widest window (5 ms of 40): the writers whose windows end in
   * the same 5 ms are woken in one turn of the event loop, so their batches go in one call a
   * scope, and a window that ends on a tick (as every window after the first one of a steady
   * stream does) waits for nothing more. Returns a function that stops the wait.
   */
  atTick(at: number, wake: () => void): () => void {
    const time = Math.ceil(at / this.tickMs) * this.tickMs;
    let tick = this.ticks.get(time);
    if (!tick) {
      const wakes = new Set<() => void>();
      const timer = setTimeout(() => {
        this.ticks.delete(time);
        for (const w of wakes) w();
      }, Math.max(0, time - Date.now()));
      tick = { wakes, timer };
      this.ticks.set(time, tick);
    }
    const mine = tick;
    mine.wakes.add(wake);
    return () => {
      mine.wakes.delete(wake);
      // Still this tick's (not fired, not a later one set for the same time) and wanted by no one.
      if (mine.wakes.size === 0 && this.ticks.get(time) === mine) {
        clearTimeout(mine.timer);
        this.ticks.delete(time);
      }
    };
  }

  /** 0 for a lone writer to 1 at `fullAt` writers. */
  private load(writers: number): number {
    const { fullAt } = this.widening;
    return fullAt <= 1 ? 1 : Math.min(1, Math.max(0, writers - 1) / (fullAt - 1));
  }

  append(attempt: Attempt, batch: number, events: readonly (readonly [string, string])[]): Promise<AppendAnswer> {
    return new Promise((resolve, reject) => {
      const scope = attempt.scope;
      let queue = this.pending.get(scope);
      if (!queue) {
        queue = [];
        this.pending.set(scope, queue);
      }
      let bytes = 0;
      for (const [type, data] of events) bytes += type.length + data.length;
      queue.push({ item: { attempt, batch, events }, bytes, resolve, reject });
      if (queue.length === 1 && !this.sending.has(scope)) this.sendLater(scope);
    });
  }

  /** Sends the scope's call after this turn of the event loop, with every batch made in it. */
  private sendLater(scope: string): void {
    setImmediate(() => this.send(scope));
  }

  private send(scope: string): void {
    const queue = this.pending.get(scope);
    if (this.sending.has(scope) || !queue?.length) return;
    let n = 0;
    let bytes = 0;
    const fits = (next: Queued) => n === 0 || bytes + next.bytes <= MAX_BYTES_PER_CALL;
    while (n < queue.length && n < MAX_RUNS_PER_CALL && fits(queue[n])) bytes += queue[n++].bytes;
    const call = queue.splice(0, n);
    if (queue.length === 0) this.pending.delete(scope);
    this.sending.add(scope);
    this.calls++;
    this.batches += call.length;
    this.transitions.appendMany(call.map((q) => q.item)).then(
      (answers) => call.forEach((q, i) => {
        const a = answers[i];
        if (a instanceof Error) q.reject(a);
        else q.resolve(a);
      }),
      (err: Error) => { for (const q of call) q.reject(err); },
    ).finally(() => {
      this.sending.delete(scope);
      if (this.pending.get(scope)?.length) this.sendLater(scope);
    });
  }
}
