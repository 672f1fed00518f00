import type { Redis } from 'ioredis';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import { EventFollower, type FollowOptions } from './follower.ts';
import { readEvents, type RunEvent } from './log.ts';
import type { EventHub } from './hub.ts';
import { TERMINAL_STATUSES } from '../contract/runs.ts';

/** Where a reader's events go: the SSE response, or any other consumer. */
export type StreamSink = Pick<FollowOptions, 'deliver' | 'writable' | 'onEnd' | 'onError'> & {
  /** Bytes the sink holds that its reader has not taken yet (a response's unsent buffer). */
  pending?(): number;
};

/** What this process's readers hold and have read (the /metrics of the API). */
export interface StreamBuffers {
  /** Open followers. */
  readers: number;
  /** Bytes they hold now: events read from logs and not yet delivered, and what their sinks hold unsent. */
  held: number;
  /** The most one of them holds now. */
  most: number;
  /** Bytes of events read from logs for readers since the process started. */
  read: number;
}

/**
 * Readers of run event logs in this process: the API's one domain entry for streams.
 * `open` decides what a reader asking for events after `afterId` gets: an error for an
 * unknown run (or an expired log), 'ended' when it already has the `end` event, or a
 * follower (replay, then live; see EventFollower) that the caller starts once it is ready
 * to receive.
 */
export class RunStreams {
  private readonly readers = new Map<EventFollower, StreamSink>();
  private bytesRead = 0;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly hub: EventHub,
  ) {}

  /**
   * `fresh`: the caller made the run a moment ago (a submit that streams its own run), so it
   * exists and has not ended: its log is not looked at before the follower reads it.
   */
  async open(scope: string, runId: string, afterId: string, sink: StreamSink, o: { fresh?: boolean } = {}): Promise<EventFollower | 'ended'> {
    if (!o.fresh && afterId === '0') {
      // A reader from the start streams whatever the log holds: whether the log is there is
      // all it asks (not its last event, which is the whole answer once the run ended).
      if (!(await this.redis.exists(this.keys.scope(scope).events(runId)))) throw new BatonError('RUN_NOT_FOUND');
    } else if (!o.fresh && (await this.caughtUp(scope, runId, afterId))) {
      return 'ended';
    }
    const follower: EventFollower = new EventFollower({
      redis: this.redis, keys: this.keys, hub: this.hub, scope, runId, afterId, ...sink,
      onRead: (bytes) => { this.bytesRead += bytes; },
      onStopped: () => this.readers.delete(follower),
    });
    this.readers.set(follower, sink);
    return follower;
  }

  /**
   * Whether a reader that has every event up to `afterId` has the run's `end`: no event
   * follows its id, and the run ended (the `end` is its log's last event, written with the
   * terminal status in one call). One transaction, so a finish between the two reads cannot
   * pass unseen. Asking for the event after the id (COUNT 1) costs that event, which the
   * reader is about to read anyway; the log's last event, asked for before, is the whole
   * answer once the run ended, read again by every reader that resumed.
   */
  private async caughtUp(scope: string, runId: string, afterId: string): Promise<boolean> {
    const sk = this.keys.scope(scope);
    const replies = await this.redis.multi()
      .exists(sk.events(runId))
      .xrangeBuffer(sk.events(runId), `(${afterId}`, '+', 'COUNT', 1)
      .hget(sk.run(runId), 'status')
      .exec();
    if (!replies) throw new Error('the stream check was aborted');
    for (const [err] of replies) if (err) throw err;
    const [[, exists], [, next], [, status]] = replies as [[null, number], [null, unknown[]], [null, string | null]];
    if (!exists) throw new BatonError('RUN_NOT_FOUND');
    return next.length === 0 && status !== null && (TERMINAL_STATUSES as readonly string[]).includes(status);
  }

  /**
   * A run's log as it is now, page by page, oldest first (none once it expired): a reader that
   * folds the whole log (an OpenAI response object) holds one page at a time.
   */
  async *pages(scope: string, runId: string): AsyncGenerator<RunEvent[]> {
    for (let after = '0'; ;) {
      const page = await readEvents(this.redis, this.keys, scope, runId, after);
      this.bytesRead += page.reduce((n, e) => n + e.data.length, 0);
      if (page.length) yield page;
      if (page.length < 1000) return;
      after = page[page.length - 1].id;
    }
  }

  /**
   * A run's whole log, read in pages, or undefined when it is gone (past its retention) or
   * holds more than `maxBytes` of data: a caller that can do without it is never handed more.
   */
  async readLog(scope: string, runId: string, maxBytes: number): Promise<RunEvent[] | undefined> {
    const events: RunEvent[] = [];
    let bytes = 0;
    for await (const page of this.pages(scope, runId)) {
      bytes += page.reduce((n, e) => n + e.data.length, 0);
      if (bytes > maxBytes) return undefined;
      events.push(...page);
    }
    return events.length ? events : undefined;
  }

  /** The id of the last event in a run's log ('0' when it has none). */
  async lastId(scope: string, runId: string): Promise<string> {
    const rows = await this.redis.xrevrange(this.keys.scope(scope).events(runId), '+', '-', 'COUNT', 1);
    return rows[0]?.[0] ?? '0';
  }

  /** What the open readers hold now, and what was read for readers so far. */
  buffers(): StreamBuffers {
    let held = 0;
    let most = 0;
    for (const [follower, sink] of this.readers) {
      const bytes = follower.heldBytes + (sink.pending?.() ?? 0);
      held += bytes;
      most = Math.max(most, bytes);
    }
    return { readers: this.readers.size, held, most, read: this.bytesRead };
  }
}
