import type { Redis } from 'ioredis';
import type { EventHub } from './hub.ts';
import { compareIds, readEvents, type LiveBatch, type RunEvent } from './log.ts';
import type { Keys } from '../keys.ts';

/**
 * Replay reads pages of about this many bytes (the count of the next page is what would fit
 * were every event as large as the largest of the last page, and at most twice the last
 * count), so a log of large events (tool results, answers) is read a few events at a time,
 * down to one: never tens of megabytes in one read.
 */
const PAGE_BYTES = 32 * 1024;
/**
 * A page goes to the reader in slices of about this many bytes (a slice ends with the event
 * that reaches it), each once the reader took the one before. When the reader has not taken
 * a slice, the rest of the page is let go and read again once it has: a reader that stops
 * reading holds what it did not take of its last slice, never a page besides (16 KiB: the
 * response's high-water mark on Node 20, so a slice is what a socket buffer takes at once).
 */
const SLICE_BYTES = 16 * 1024;
/** Events of the first page, before their size is known; and the bounds of any page. */
const FIRST_PAGE = 4;
const MIN_PAGE = 1;
const MAX_PAGE = 500;

/** The size an event is counted at (its text as read from Redis, in UTF-16 units). */
export function eventSize(e: RunEvent): number {
  return e.data.length + e.type.length + e.id.length;
}

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
  /**
   * Asked after each slice of a log read: undefined when the reader can take more now, else a
   * promise that settles once it took what it has (the replay waits instead of piling up).
   */
  writable?(): Promise<void> | undefined;
  /** Bytes of events read from the log for this reader (counted per page, as read). */
  onRead?(bytes: number): void;
  /** The follower stopped (after its end, an error, or stop()). */
  onStopped?(): void;
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
  /** The page of the log being handed to the reader, where its next slice starts, and the bytes of it not yet handed. */
  private page: RunEvent[] = [];
  private next = 0;
  private inHand = 0;

  constructor(private readonly o: FollowOptions) {
    this.lastId = o.afterId;
  }

  /** Bytes of events read from the log and not yet delivered: at most a page, and none while the reader is behind. */
  get heldBytes(): number {
    return this.inHand;
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
    this.page = [];
    this.inHand = 0;
    this.o.onStopped?.();
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

  /**
   * Reads the log after the last id delivered, a page at a time, each slice once the reader
   * took the one before. The page lives in `this.page`, never in a local of this function: a
   * suspended async function keeps its locals, and so would keep a page it let go.
   */
  private async readLog(): Promise<void> {
    let count = FIRST_PAGE;
    for (;;) {
      const read = await this.readPage(count);
      if (!read) return;
      count = read.count;
      for (;;) {
        const slice = this.sendSlice();
        if (this.stopped || (slice.rest === 0 && read.last)) return;
        const taken = this.o.writable?.();
        if (taken) {
          // The reader has not taken this slice: nothing of the page is kept while it waits.
          // The rest is read again from the last id once it has, in pages of about a slice
          // while the reader is slow, so one that stopped reading holds what it did not take,
          // never a page besides.
          if (slice.rest > 0) {
            this.page = [];
            this.next = 0;
            this.inHand = 0;
            count = Math.max(MIN_PAGE, slice.events);
          }
          await taken;
          if (this.stopped) return;
        }
        if (this.page.length === 0) break;
      }
    }
  }

  /** Reads the page after the last id delivered into `this.page`; the next page's count, or undefined when the reading is over. */
  private async readPage(count: number): Promise<{ last: boolean; count: number } | undefined> {
    const page = await readEvents(this.o.redis, this.o.keys, this.o.scope, this.o.runId, this.lastId, count);
    if (this.stopped) return undefined;
    // A log that expired (RETENTION_MS after the run ended) while a reader joined will never
    // bring its `end`: finish the reader now instead of keeping it open forever; a reconnect
    // then gets the 404 an expired run answers.
    if (page.length === 0 && !(await this.o.redis.exists(this.o.keys.scope(this.o.scope).events(this.o.runId)))) {
      if (this.stopped) return undefined;
      void this.stop();
      this.o.onEnd();
      return undefined;
    }
    let biggest = 1;
    let bytes = 0;
    for (const e of page) {
      const size = eventSize(e);
      biggest = Math.max(biggest, size);
      bytes += size;
    }
    this.o.onRead?.(bytes);
    this.page = page;
    this.next = 0;
    this.inHand = bytes;
    return { last: page.length < count, count: Math.max(MIN_PAGE, Math.min(MAX_PAGE, 2 * count, Math.floor(PAGE_BYTES / biggest))) };
  }

  /** Delivers the page's next slice; how many events it had, and how many are left in the page. */
  private sendSlice(): { events: number; rest: number } {
    const page = this.page;
    const from = this.next;
    let bytes = 0;
    let to = from;
    while (to < page.length && bytes < SLICE_BYTES) bytes += eventSize(page[to++]);
    this.inHand -= bytes;
    if (to === page.length) {
      this.page = [];
      this.next = 0;
    } else {
      this.next = to;
    }
    this.deliver(page.slice(from, to));
    return { events: to - from, rest: this.page.length - this.next };
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
