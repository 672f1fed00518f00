import type { Redis } from 'ioredis';
import type { AssembleRequest, HistoryMessage, MemorySession, SlidingWindowOptions } from './memory-session.ts';
import { slidingWindow } from './sliding-window.ts';

/**
 * The built-in store: a session's history is the Redis list `<scope base>session:<sid>:messages`,
 * one JSON message per entry, oldest first. It has no `append` method on purpose: its turn
 * is written by the run's finish transition (finish-1.lua), in the same atomic, fenced
 * script that ends the run, which is what makes the commit exactly once without any
 * deduplication. With a window, `assemble` hands the agent only the newest messages.
 */
export class RedisMemorySession implements MemorySession {
  readonly assemble?: (request: AssembleRequest) => Promise<HistoryMessage[]>;

  constructor(
    private readonly redis: Redis,
    private readonly key: string,
    window?: SlidingWindowOptions,
    /** The list as already read (by the claim); the first load uses it instead of reading again. */
    private preloaded?: string[],
    /**
     * The claim read only the newest messages that fit HISTORY_READ_MAX_BYTES: `tool` messages
     * at the start of what it read answer a call that did not fit, and are left out (a model
     * rejects a tool result without its call).
     */
    private readonly cut = false,
  ) {
    if (window) this.assemble = async () => slidingWindow(await this.load(), window);
  }

  async load(): Promise<HistoryMessage[]> {
    const claimed = this.preloaded !== undefined;
    const raw = this.preloaded ?? (await this.redis.lrange(this.key, 0, -1));
    this.preloaded = undefined;
    const messages = raw.map((m) => JSON.parse(m) as HistoryMessage);
    if (!claimed || !this.cut) return messages;
    let first = 0;
    while (first < messages.length && messages[first].role === 'tool') first++;
    return first === 0 ? messages : messages.slice(first);
  }

  /** Replaces the history in one MULTI, so a reader never sees it half written. */
  async save(all: HistoryMessage[]): Promise<void> {
    const tx = this.redis.multi().del(this.key);
    if (all.length > 0) tx.rpush(this.key, ...all.map((m) => JSON.stringify(m)));
    const replies = await tx.exec();
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error('history save was aborted');
  }
}
