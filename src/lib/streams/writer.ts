import type { Speaker } from '../contract/events.ts';
import type { Attempt } from '../transitions/attempt.ts';
import { LeaseLostError } from '../transitions/script-codes.ts';
import type { WorkerGateway } from '../transitions/attempt-gateway.ts';
import type { Appender } from './appender.ts';

interface Pending { type: string; data: string; text?: string; from?: Speaker }
/** A numbered batch of events; the `append` script (or the finish that carries it) applies a number once. */
export interface Batch { no: number; events: [string, string][]; tokens: number }

export interface EventWriterOptions {
  transitions: WorkerGateway;
  /**
   * Where batches go: the process's Appender (src/lib/streams/appender.ts), which gathers the
   * batches of its runs into one call per scope and ends their windows on its ticks; absent,
   * each batch is its own call and the window its own timer.
   */
  appender?: Pick<Appender, 'append' | 'opened' | 'closed' | 'flushMs' | 'atTick'>;
  attempt: Attempt;
  /** The token window of a lone run (EMIT_FLUSH_MS); the appender widens it when many runs stream. */
  flushMs: number;
  flushTokens: number;
  /** Called once when a write is refused because the lease moved on. */
  onLeaseLost: (err: LeaseLostError) => void;
  /** Called after each append that landed, with its event and token counts (metrics). */
  onWritten?: (events: number, tokens: number) => void;
}

/**
 * The most text one `token` event carries, in UTF-16 units. Coalescing stops there and a
 * longer emit is cut into events of this size (never inside a surrogate pair): tokens that
 * pile up behind a slow write, or one huge emit, would otherwise become one event of
 * megabytes, which every reader's API process has to parse, frame and send in one piece.
 */
export const MAX_TOKEN_EVENT_CHARS = 64 * 1024;

/** A write that failed (Redis blip) is tried again after this, doubling up to 2 s. */
const RETRY_BASE_MS = 50;
const RETRY_MAX_MS = 2_000;

/**
 * Writes a run's events through the fenced `append` script.
 *
 * Token deltas are coalesced: consecutive tokens of one speaker (agent and role) become one
 * `token` event of at most MAX_TOKEN_EVENT_CHARS, so a reader can still tell who said what, and token writes
 * start at most once per `flushMs` (sooner once `flushTokens` tokens are queued), so a fast
 * model costs tens of round trips per second instead of one per token. The window is
 * leading-edge: a token that arrives after `flushMs` of quiet is written at once, and in a
 * steady stream a token waits for the rest of the current window only (half of it on
 * average), not a whole window. Tokens that arrive while a write is in flight join the next
 * batch. emit() never waits on Redis.
 *
 * Writes are serialized (one in flight), so the stream keeps emit order. Each batch has a
 * number; a batch whose write failed is retried as is, with the same number, and the
 * script applies a number once: a write that landed but whose reply was lost is not
 * duplicated, and a Redis blip delays tokens instead of dropping them.
 */
export class EventWriter {
  private queue: Pending[] = [];
  private tokensQueued = 0;
  /** When the last write of new events started: the next token write waits until flushMs after it. */
  private lastWriteAt = 0;
  /** A non-token event is queued: write without waiting for the timer. */
  private urgent = false;
  private unacked: Batch | undefined;
  private batchNo = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Stops the wait for the appender's tick, while one is set. */
  private untick: (() => void) | undefined;
  private writing: Promise<void> | undefined;
  private failures = 0;
  private lost = false;
  private closed = false;
  /** Number of append round trips made (the bench reports it). */
  writes = 0;

  constructor(private readonly o: EventWriterOptions) {
    o.appender?.opened();
  }

  token(text: string, from?: Speaker): void {
    if (this.lost || this.closed || text === '') return;
    for (let rest = text; rest !== '';) {
      const last = this.queue[this.queue.length - 1];
      const room = last?.text !== undefined && sameSpeaker(last.from, from) ? MAX_TOKEN_EVENT_CHARS - last.text.length : 0;
      // Empty when the room left is one unit and a surrogate pair comes: it goes to a new event.
      let piece = room > 0 ? head(rest, room) : '';
      if (piece !== '') {
        last!.text += piece;
      } else {
        piece = head(rest, MAX_TOKEN_EVENT_CHARS);
        this.queue.push({ type: 'token', data: '', text: piece, from });
      }
      rest = rest.slice(piece.length);
    }
    this.tokensQueued++;
    this.schedule();
  }

  event(type: string, data: unknown): void {
    if (this.lost || this.closed) return;
    this.queue.push({ type, data: JSON.stringify(data) });
    this.urgent = true;
    this.schedule();
  }

  /** Writes everything queued so far; rejects if a write fails (nothing is dropped). */
  async flush(): Promise<void> {
    this.clearTimer();
    for (;;) {
      if (this.writing) {
        await this.writing.catch(() => {});
        continue;
      }
      if (this.lost) throw new LeaseLostError(this.o.attempt.runId);
      if (!this.unacked && this.queue.length === 0) return;
      await this.writeOne();
    }
  }

  /**
   * For the finish transition, which writes the attempt's last events itself (one script call
   * fewer per run): waits for the write in flight, writes a batch that failed before, then
   * hands over what is queued as the next batch instead of writing it. The writer takes no
   * event after this. The batch stays unacknowledged until acknowledge(): if the finish does
   * not happen, flush() writes it as any other batch, applied once all the same.
   */
  async finalBatch(): Promise<Batch | undefined> {
    this.shut();
    this.clearTimer();
    while (this.writing) await this.writing.catch(() => {});
    if (this.lost) throw new LeaseLostError(this.o.attempt.runId);
    if (this.unacked) await this.flush();
    if (this.queue.length === 0) return undefined;
    this.unacked = this.takeBatch();
    return this.unacked;
  }

  /** The finish carrying `batch` landed: the batch is written. */
  acknowledge(batch: Batch): void {
    if (this.unacked !== batch) return;
    this.unacked = undefined;
    this.o.onWritten?.(batch.events.length, batch.tokens);
  }

  /** Stops background writes; what is still queued is dropped (the attempt is over). */
  close(): void {
    this.shut();
    this.clearTimer();
  }

  /** Takes no more events; the appender counts one writer fewer (once). */
  private shut(): void {
    if (!this.closed) this.o.appender?.closed();
    this.closed = true;
  }

  /** Decides when the background write happens: now, after flushMs, or after the write in flight. */
  private schedule(): void {
    if (this.writing || this.closed || this.lost) return;
    const windowEnd = this.lastWriteAt + (this.o.appender?.flushMs(this.o.flushMs) ?? this.o.flushMs);
    const windowLeft = windowEnd - Date.now();
    if (this.unacked || this.urgent || this.tokensQueued >= this.o.flushTokens || (this.queue.length > 0 && windowLeft <= 0)) {
      this.clearTimer();
      void this.writeOne().then(() => this.schedule(), () => this.retryLater());
    } else if (this.queue.length > 0 && !this.timer && !this.untick) {
      const wake = () => {
        this.timer = undefined;
        this.untick = undefined;
        this.urgent = true;
        this.schedule();
      };
      if (this.o.appender) this.untick = this.o.appender.atTick(windowEnd, wake);
      else this.timer = setTimeout(wake, windowLeft);
    }
  }

  private retryLater(): void {
    if (this.closed || this.lost) return;
    const delay = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.min(this.failures, 6));
    this.clearTimer();
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.schedule();
    }, delay);
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.untick?.();
    this.untick = undefined;
  }

  private takeBatch(): Batch {
    const events = this.queue.map((p): [string, string] =>
      [p.type, p.text !== undefined ? JSON.stringify({ text: p.text, ...p.from }) : p.data]);
    const batch = { no: ++this.batchNo, events, tokens: this.tokensQueued };
    this.queue = [];
    this.tokensQueued = 0;
    this.urgent = false;
    return batch;
  }

  /** One append round trip: the unacknowledged batch if there is one, else what is queued. */
  private writeOne(): Promise<void> {
    if (!this.unacked) this.lastWriteAt = Date.now();
    const batch = this.unacked ?? this.takeBatch();
    this.unacked = batch;
    this.writing = (async () => {
      try {
        this.writes++;
        await (this.o.appender ?? this.o.transitions).append(this.o.attempt, batch.no, batch.events);
        this.unacked = undefined;
        this.failures = 0;
        this.o.onWritten?.(batch.events.length, batch.tokens);
      } catch (err) {
        if (err instanceof LeaseLostError) {
          this.lost = true;
          this.unacked = undefined;
          this.queue = [];
          this.o.onLeaseLost(err);
        } else {
          this.failures++;
        }
        throw err;
      } finally {
        this.writing = undefined;
      }
    })();
    return this.writing;
  }
}

/** At most `n` (≥ 1) units of `s` from its start, one fewer rather than half a surrogate pair. */
function head(s: string, n: number): string {
  if (s.length <= n) return s;
  const high = s.charCodeAt(n - 1);
  return s.slice(0, high >= 0xd800 && high <= 0xdbff ? n - 1 : n);
}

function sameSpeaker(a: Speaker | undefined, b: Speaker | undefined): boolean {
  return a?.agent === b?.agent && a?.role === b?.role;
}
