import type { Redis } from 'ioredis';
import type { Logger } from './logger.ts';
import { parseNotification, type RunEvent } from './event-log.ts';

export interface HubListener {
  events(events: RunEvent[]): void;
  /** The subscriber connection was re-established: notifications may have been missed. */
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
      let events: RunEvent[];
      try {
        events = parseNotification(message);
      } catch (err) {
        this.log.warn({ channel, err: (err as Error).message }, 'unreadable notification');
        return;
      }
      for (const l of set) l.events(events);
    });
    subscriber.on('ready', () => {
      // ioredis re-subscribes by itself after a reconnect; readers must re-read what they missed.
      if (this.wasReady) for (const set of this.channels.values()) for (const l of set) l.resync();
      this.wasReady = true;
    });
    if (subscriber.status === 'ready') this.wasReady = true;
  }

  get listenerCount(): number {
    let n = 0;
    for (const set of this.channels.values()) n += set.size;
    return n;
  }

  /** Resolves once the channel is subscribed, so nothing published afterwards is missed. */
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
      if (!s) return;
      s.delete(listener);
      if (s.size === 0) {
        this.channels.delete(channel);
        await this.subscriber.unsubscribe(channel).catch(() => {});
      }
    };
  }
}
