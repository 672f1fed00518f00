import type { Redis } from 'ioredis';
import type { EventHub } from './hub.ts';
import { compareIds, readEvents, type LiveBatch, type RunEvent } from './log.ts';
import type { Keys } from '../keys.ts';

/**
 * Replay reads pages of about this many bytes (the count of the next page is what would fit
 * were every event as large as the largest of the last page, and at most twice the last
 * count) and hands them to the reader in slices of it, each after the reader took the one
 * before: a reader replaying a long log holds about one page, however long the log and
 * however slowly it reads. A log of large events (tool results, answers) is read a few
 * events at a time, down to one: never tens of megabytes in one read.
 */
const PAGE_BYTES = 32 * 1024;
/** Events of the first page, before their size is known; and the bounds of any page. */
const FIRST_PAGE = 4;
const MIN_PAGE = 1;
const MAX_PAGE = 500;

/** Which run's log to follow, from where, through which connections. */
export interface FollowTarget {
  redis: Redis;
  keys: Keys;
  hub: EventHub;
  scope: string;
  runId: string;
  /** Deliver events after this id ('0' = from the start). */
  afterId: string;
}

export interface FollowOptions extends FollowTarget {
  /** Receives each event exactly once, in log order. */
  deliver(events: RunEvent[]): void;
  /** Awaited between pages of a log read, so a replay waits for a slow reader instead of piling up. */
  writable?(): Promise<void>;
  /** The `end` event was delivered, or the log expired before it could be; the follower has stopped. */
  onEnd(): void;
  /** Reading the log failed (Redis unreachable); the follower has stopped. */
  onError(err: Error): void;
}

/**
 * Follows a run's event log: replay after `afterId`, then live, each event once and in order.
 *
 * The hand-off from replay to live must have no gap and no duplicate. The channel is
 * subscribed before the log is read, and live batches that arrive during a read are held.
 * Every live batch carries `prev`, the id of the log entry just before it: a batch is
 * delivered only when `prev` is at or before the last id delivered (what precedes it has
 * been seen); otherwise a notification was missed (subscriber reconnect, a batch published
 * between a read and a subscription) and the log is read again from the last id. Events at
 * or before the last id delivered are dropped, so overlap between replay and live is harmless.
 */
export class EventFollower {
  private lastId: string;
  private held: LiveBatch[] = [];
  private reading = false;
  private readAgain = false;
  private stopped = false;
  private unsubscribe: (() => Promise<void>) | undefined;

  constructor(private readonly o: FollowOptions) {
    this.lastId = o.afterId;
  }

  /** The id of the last event delivered (or the starting id). */
  get position(): string {
    return this.lastId;
  }

  /** Subscribes, then replays the log; resolves when the replay (not the run) is done. */
  async start(): Promise<void> {
    this.reading = true;
    this.unsubscribe = await this.o.hub.subscribe(this.o.keys.scope(this.o.scope).live, this.o.runId, {
      batch: (b) => this.onBatch(b),
      resync: () => this.requestRead(),
    });
    if (this.stopped) return void (await this.unsubscribe());
    this.readAgain = true;
    this.reading = false;
    await this.pump();
  }

  /** Idempotent; a stopped follower delivers nothing more. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.held = [];
    await this.unsubscribe?.();
  }

  private onBatch(b: LiveBatch): void {
    if (this.stopped) return;
    if (this.reading) this.held.push(b);
    else if (this.follows(b)) this.deliver(b.events);
    else this.requestRead();
  }

  /** True when nothing between the last delivered event and this batch can be missing. */
  private follows(b: LiveBatch): boolean {
    return b.prev === '0' || (this.lastId !== '0' && compareIds(b.prev, this.lastId) <= 0);
  }

  private requestRead(): void {
    if (this.stopped) return;
    this.readAgain = true;
    if (!this.reading) void this.pump();
  }

  /** Reads the log until no read is pending, then delivers the live batches held meanwhile. */
  private async pump(): Promise<void> {
    this.reading = true;
    try {
      while (this.readAgain && !this.stopped) {
        this.readAgain = false;
        await this.readLog();
        const held = this.held;
        this.held = [];
        for (const b of held) {
          if (this.stopped) return;
          if (this.follows(b)) this.deliver(b.events);
          else this.readAgain = true;
        }
      }
    } catch (err) {
      if (this.stopped) return;
      await this.stop();
      this.o.onError(err as Error);
    } finally {
      this.reading = false;
    }
  }

  private async readLog(): Promise<void> {
    let count = FIRST_PAGE;
    for (;;) {
      const page = await readEvents(this.o.redis, this.o.keys, this.o.scope, this.o.runId, this.lastId, count);
      if (this.stopped) return;
      // A log that expired (RETENTION_MS after the run ended) while a reader joined will never
      // bring its `end`: finish the reader now instead of keeping it open forever; a reconnect
      // then gets the 404 an expired run answers.
      if (page.length === 0 && !(await this.o.redis.exists(this.o.keys.scope(this.o.scope).events(this.o.runId)))) {
        if (this.stopped) return;
        void this.stop();
        this.o.onEnd();
        return;
      }
      const last = page.length < count;
      let biggest = 1;
      let slice = 0;
      let from = 0;
      for (let i = 0; i < page.length; i++) {
        const size = page[i].data.length + page[i].type.length + page[i].id.length;
        biggest = Math.max(biggest, size);
        slice += size;
        if (slice < PAGE_BYTES && i < page.length - 1) continue;
        this.deliver(page.slice(from, i + 1));
        from = i + 1;
        slice = 0;
        if (this.stopped || (last && from === page.length)) break;
        await this.o.writable?.();
        if (this.stopped) return;
      }
      if (last || this.stopped) return;
      count = Math.max(MIN_PAGE, Math.min(MAX_PAGE, 2 * count, Math.floor(PAGE_BYTES / biggest)));
    }
  }

  private deliver(events: RunEvent[]): void {
    const fresh: RunEvent[] = [];
    let ended = false;
    for (const e of events) {
      if (this.lastId !== '0' && compareIds(e.id, this.lastId) <= 0) continue;
      fresh.push(e);
      this.lastId = e.id;
      if (e.type === 'end') {
        ended = true;
        break;
      }
    }
    if (fresh.length) this.o.deliver(fresh);
    if (ended && !this.stopped) {
      void this.stop();
      this.o.onEnd();
    }
  }
}
