import type { Attempt } from '../transitions/attempt.ts';
import type { AppendAnswer, AppendItem } from '../transitions/append.ts';
import type { WorkerGateway } from '../transitions/attempt-gateway.ts';

/** Runs whose batches one call carries at most, and the bytes of their events (at least one batch). */
const MAX_RUNS_PER_CALL = 200;
const MAX_BYTES_PER_CALL = 1024 * 1024;
/** The longest a scope's call waits for more batches, as a share of the widest window (gatherMs). */
const GATHER_SHARE = 1 / 8;

interface Queued { item: AppendItem; bytes: number; resolve(a: AppendAnswer): void; reject(err: Error): void; at: number }

/**
 * How a run's token window (EventWriter's flushMs) widens with the runs this process streams:
 * the writer's own for a lone run, linearly up to `maxMs` once `fullAt` runs have writers open
 * (EMIT_FLUSH_MAX_MS, EMIT_FLUSH_FULL_AT). `maxMs` 0: it never widens.
 */
export interface Widening { maxMs: number; fullAt: number }

/**
 * Gathers the appends of one process's runs into one `append` call per scope: every run's
 * writer (src/lib/streams/writer.ts) hands its batch here, and a scope has at most one call
 * in flight; the batches that arrive meanwhile go in its next call, together. A lone run's
 * batch is sent at once (after the current turn of the event loop, so batches made in the
 * same turn share a call); when many runs of the scope stream, a call waits up to gatherMs
 * for more, so it carries many runs' batches and its own cost and its notification (one
 * message for all of them) are shared. Each batch keeps its number and is applied once, so a
 * call that fails is retried by each writer as before.
 */
export class Appender {
  private readonly pending = new Map<string, Queued[]>();
  private readonly sending = new Set<string>();
  /** Calls made and batches they carried (the bench reports them). */
  calls = 0;
  batches = 0;
  /** Writers open in this process (one per attempt under way): how many runs may stream. */
  private writers = 0;
  /** The same, by scope: a scope's call waits only for batches of its own runs. */
  private readonly scopeWriters = new Map<string, number>();

  constructor(
    private readonly transitions: Pick<WorkerGateway, 'appendMany'>,
    private readonly widening: Widening = { maxMs: 0, fullAt: 1 },
  ) {}

  /** A run's writer opened (EventWriter's constructor); `closed` when it takes no more events. */
  opened(scope: string): void {
    this.writers++;
    this.scopeWriters.set(scope, (this.scopeWriters.get(scope) ?? 0) + 1);
  }

  closed(scope: string): void {
    this.writers--;
    const left = (this.scopeWriters.get(scope) ?? 1) - 1;
    if (left > 0) this.scopeWriters.set(scope, left);
    else this.scopeWriters.delete(scope);
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
   * How long a scope's first batch waits for others before their call goes: none for a lone
   * run of the scope, up to an eighth of the widest window once `fullAt` runs of the scope
   * stream from this process (5 ms of 40). Each run's window starts when its own tokens do, so
   * without it the runs' batches come spread over the window and a call carries the few that
   * came while the one before it was out. Runs of other scopes go in other calls, so they do
   * not count.
   */
  gatherMs(scope: string): number {
    return this.widening.maxMs * GATHER_SHARE * this.load(this.scopeWriters.get(scope) ?? 0);
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
      queue.push({ item: { attempt, batch, events }, bytes, resolve, reject, at: Date.now() });
      if (queue.length === 1 && !this.sending.has(scope)) this.sendLater(scope);
    });
  }

  /** Sends the scope's call once its oldest batch has waited gatherMs (at once when nothing widens). */
  private sendLater(scope: string): void {
    const wait = (this.pending.get(scope)?.[0].at ?? 0) + this.gatherMs(scope) - Date.now();
    if (wait < 1) setImmediate(() => this.send(scope));
    else setTimeout(() => this.send(scope), wait);
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
