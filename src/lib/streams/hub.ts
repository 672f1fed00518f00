import type { Redis } from 'ioredis';
import type { Logger } from '../logger.ts';
import { parseNotification, type LiveBatch } from './log.ts';

export interface HubListener {
  batch(batch: LiveBatch): void;
  /** The subscriber connection came back: notifications may have been missed meanwhile. */
  resync(): void;
}

/**
 * One Redis subscriber connection per process, shared by every live reader. A scope's runs
 * share its channel (one message per script call carries every run's batch): the hub parses
 * each message once and hands each run's batch to that run's listeners. Channels are
 * reference counted: the first listener of a scope subscribes, the last one to leave
 * unsubscribes. A process following one run of a scope receives the notifications of all
 * the scope's runs, and drops those nobody here follows.
 */
export class EventHub {
  /** channel -> runId -> listeners. */
  private readonly channels = new Map<string, Map<string, Set<HubListener>>>();
  private wasReady = false;

  constructor(
    private readonly subscriber: Redis,
    private readonly log: Logger,
    /** Each notification heard on a channel followed here, by how it was sent (a metric). */
    private readonly onHeard?: (kind: 'publish' | 'spublish') => void,
  ) {
    // A scope's notifications come by PUBLISH or SPUBLISH (LIVE_PUBSUB, which processes of one
    // deployment may differ in while it changes): the hub listens to both, and they are read alike.
    const heard = (kind: 'publish' | 'spublish', channel: string, message: string) => {
      const runs = this.channels.get(channel);
      if (!runs) return;
      this.onHeard?.(kind);
      let batches: Map<string, LiveBatch>;
      try {
        batches = parseNotification(message);
      } catch (err) {
        this.log.warn({ channel, err: (err as Error).message }, 'unreadable notification');
        return;
      }
      for (const [runId, batch] of batches) {
        for (const l of runs.get(runId) ?? []) l.batch(batch);
      }
    };
    subscriber.on('message', (channel: string, message: string) => heard('publish', channel, message));
    subscriber.on('smessage', (channel: string, message: string) => heard('spublish', channel, message));
    subscriber.on('ready', () => {
      if (this.wasReady) this.afterReconnect();
      this.wasReady = true;
    });
    if (subscriber.status === 'ready') this.wasReady = true;
    // On a Cluster, SSUBSCRIBEs live on one connection per primary, which ioredis subscribes
    // again when the slots move (a failover) and then says so: readers re-read their logs, as
    // after a reconnect.
    subscriber.on('subscribersReady', () => this.afterReconnect());
  }

  get listenerCount(): number {
    let n = 0;
    for (const runs of this.channels.values()) for (const set of runs.values()) n += set.size;
    return n;
  }

  get channelCount(): number {
    return this.channels.size;
  }

  /**
   * Listens to `runId`'s batches on `channel` (its scope's). Resolves once the channel is
   * subscribed, so nothing published afterwards is missed. The listener may receive batches
   * before that (another listener's subscription).
   */
  async subscribe(channel: string, runId: string, listener: HubListener): Promise<() => Promise<void>> {
    let runs = this.channels.get(channel);
    if (!runs) {
      runs = new Map();
      this.channels.set(channel, runs);
    }
    let set = runs.get(runId);
    if (!set) {
      set = new Set();
      runs.set(runId, set);
    }
    set.add(listener);
    // (S)SUBSCRIBE is idempotent; awaiting it for every listener guarantees the confirmation.
    await Promise.all([this.subscriber.subscribe(channel), this.subscriber.ssubscribe(channel)]);
    return async () => {
      const r = this.channels.get(channel);
      const s = r?.get(runId);
      if (!r || !s || !s.delete(listener)) return;
      if (s.size === 0) r.delete(runId);
      if (r.size === 0) {
        this.channels.delete(channel);
        await Promise.all([this.subscriber.unsubscribe(channel), this.subscriber.sunsubscribe(channel)]).catch(() => {});
      }
    };
  }

  /**
   * ioredis re-subscribes after a reconnect, but emits 'ready' before the server confirmed
   * it: a reader that re-read its log right then could miss an event appended between that
   * read and the subscription. Our own SUBSCRIBE is answered after ioredis's, so readers
   * re-read once it is confirmed.
   */
  private afterReconnect(): void {
    const channels = [...this.channels.keys()];
    if (channels.length === 0) return;
    // One SSUBSCRIBE a channel: on a Cluster, channels of several slots may not share one.
    Promise.all([this.subscriber.subscribe(...channels), ...channels.map((ch) => this.subscriber.ssubscribe(ch))]).then(
      () => {
        for (const ch of channels) for (const set of this.channels.get(ch)?.values() ?? []) for (const l of set) l.resync();
      },
      // The connection dropped again: the next 'ready' does this once more.
      (err: Error) => this.log.warn({ err: err.message }, 'resubscribe failed'),
    );
  }
}
