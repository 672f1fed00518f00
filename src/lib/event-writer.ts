import type { Redis } from 'ioredis';
import { runScript } from './scripts.ts';
import { LeaseLostError } from './script-errors.ts';

interface Pending { type: string; data: string; text?: string }

export interface EventWriterOptions {
  redis: Redis;
  runKey: string;
  base: string;
  runId: string;
  fence: number;
  maxLen: number;
  flushMs: number;
  flushTokens: number;
  /** Called once when a write is refused because the lease moved on. */
  onLeaseLost: (err: LeaseLostError) => void;
}

/**
 * Writes a run's events through the fenced `append` script. Token deltas are coalesced:
 * consecutive tokens become one `token` event, written after `flushMs` or `flushTokens`
 * tokens, whichever comes first. Writes are serialized (one in flight), so the stream keeps
 * emit order; emit() itself never waits on Redis. A failed write keeps its events and is
 * tried again on the next flush, so a Redis blip delays tokens instead of dropping them.
 */
export class EventWriter {
  private queue: Pending[] = [];
  private tokensQueued = 0;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private lost = false;
  /** Number of append round trips made (the bench reports it). */
  writes = 0;

  constructor(private readonly o: EventWriterOptions) {}

  token(text: string): void {
    if (this.lost || text === '') return;
    const last = this.queue[this.queue.length - 1];
    if (last && last.type === 'token' && last.text !== undefined) last.text += text;
    else this.queue.push({ type: 'token', data: '', text });
    this.tokensQueued++;
    if (this.tokensQueued >= this.o.flushTokens) void this.flush().catch(() => {});
    else this.timer ??= setTimeout(() => { this.timer = undefined; void this.flush().catch(() => {}); }, this.o.flushMs);
  }

  event(type: string, data: unknown): void {
    if (this.lost) return;
    this.queue.push({ type, data: JSON.stringify(data) });
    void this.flush().catch(() => {});
  }

  /** Writes everything queued so far; rejects if a write fails (the events stay queued). */
  async flush(): Promise<void> {
    while (this.inFlight) await this.inFlight.catch(() => {});
    if (this.timer) { clearTimeout(this.timer); this.timer = undefined; }
    if (this.lost) throw new LeaseLostError(this.o.runId);
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.tokensQueued = 0;
    const argv: (string | number)[] = [this.o.base, this.o.runId, this.o.fence, this.o.maxLen];
    for (const p of batch) argv.push(p.type, p.text !== undefined ? JSON.stringify({ text: p.text }) : p.data);
    this.inFlight = (async () => {
      try {
        this.writes++;
        const reply = await runScript(this.o.redis, 'append', [this.o.runKey], argv);
        if (Number(reply[0]) === -2) {
          this.lost = true;
          const err = new LeaseLostError(this.o.runId);
          this.o.onLeaseLost(err);
          throw err;
        }
      } catch (err) {
        if (!this.lost) this.queue = batch.concat(this.queue); // keep order; retried on the next flush
        throw err;
      } finally {
        this.inFlight = undefined;
      }
    })();
    return this.inFlight;
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
