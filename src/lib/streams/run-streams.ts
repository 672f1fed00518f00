import type { Redis } from 'ioredis';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import { EventFollower, type FollowOptions } from './follower.ts';
import type { EventHub } from './hub.ts';
import { compareIds, lastEvent } from './log.ts';

/** Where a reader's events go: the SSE response, or any other consumer. */
export type StreamSink = Pick<FollowOptions, 'deliver' | 'writable' | 'onEnd' | 'onError'>;

/**
 * Readers of run event logs in this process: the API's one domain entry for streams.
 * `open` decides what a reader asking for events after `afterId` gets: an error for an
 * unknown run (or an expired log), 'ended' when it already has the `end` event, or a
 * follower (replay, then live; see EventFollower) that the caller starts once it is ready
 * to receive.
 */
export class RunStreams {
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
    if (!o.fresh) {
      const newest = await lastEvent(this.redis, this.keys, scope, runId);
      if (!newest) throw new BatonError('RUN_NOT_FOUND');
      if (newest.type === 'end' && afterId !== '0' && compareIds(newest.id, afterId) <= 0) return 'ended';
    }
    return new EventFollower({ redis: this.redis, keys: this.keys, hub: this.hub, scope, runId, afterId, ...sink });
  }
}
