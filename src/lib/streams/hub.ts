import type { Redis } from 'ioredis';
import type { Logger } from '../logger.ts';
import { parseNotification, type LiveBatch } from './log.ts';

export interface HubListener {
  batch(batch: LiveBatch): void;
  /** The subscriber connection came back: notifications may have been missed meanwhile. */
  resync(): void;
}

/**
 * One Redis subscriber connection per process, shared by every live reader. Channels are
 * reference counted: the first listener subscribes, the last one to leave unsubscribes.
 */
export class EventHub {
  private readonly channels = new Map<string, Set<HubListener>>();
  private wasReady = false;

  constructor(private readonly subscriber: Redis, private readonly log: Logger) {
    subscriber.on('message', (channel: string, message: string) => {
      const set = this.channels.get(channel);
      if (!set) return;
      let batch: LiveBatch;
      try {
        batch = parseNotification(message);
      } catch (err) {
        this.log.warn({ channel, err: (err as Error).message }, 'unreadable notification');
        return;
      }
      for (const l of set) l.batch(batch);
    });
    subscriber.on('ready', () => {
      if (this.wasReady) this.afterReconnect();
      this.wasReady = true;
    });
    if (subscriber.status === 'ready') this.wasReady = true;
  }

  get listenerCount(): number {
    let n = 0;
    for (const set of this.channels.values()) n += set.size;
    return n;
  }

  get channelCount(): number {
    return this.channels.size;
  }

  /**
   * Resolves once the channel is subscribed, so nothing published afterwards is missed.
   * The listener may receive batches before that (another listener's subscription).
   */
  async subscribe(channel: string, listener: HubListener): Promise<() => Promise<void>> {
    let set = this.channels.get(channel);
    if (!set) {
      set = new Set();
      this.channels.set(channel, set);
    }
    set.add(listener);
    // SUBSCRIBE is idempotent; awaiting it for every listener guarantees the confirmation.
    await this.subscriber.subscribe(channel);
    return async () => {
      const s = this.channels.get(channel);
      if (!s || !s.delete(listener)) return;
      if (s.size === 0) {
        this.channels.delete(channel);
        await this.subscriber.unsubscribe(channel).catch(() => {});
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
    this.subscriber.subscribe(...channels).then(
      () => {
        for (const ch of channels) for (const l of this.channels.get(ch) ?? []) l.resync();
      },
      // The connection dropped again: the next 'ready' does this once more.
      (err: Error) => this.log.warn({ err: err.message }, 'resubscribe failed'),
    );
  }
}
