/**
 * A worker process's WORKER_CONCURRENCY, shared by the BullMQ workers of its agents' queues
 * (one per agent and queue partition: see Dispatcher). Each of them may hand over a job at any time; a job takes
 * a slot before it runs and waits for one when all are taken.
 *
 * So that a busy process does not hold jobs it cannot start while another process could,
 * each queue's BullMQ worker is told how many jobs it may fetch: the jobs it holds plus the
 * slots nobody holds (at least 1, BullMQ's minimum). With every slot taken a queue fetches
 * no more than one job past its own, so at most one job per queue waits here for a slot.
 */
export class Slots<Q> {
  private used = 0;
  /** Jobs each queue handed over and not yet finished, waiting for a slot or running. */
  private readonly held = new Map<Q, number>();
  private readonly waiters: (() => void)[] = [];

  constructor(
    readonly size: number,
    /** Called with a queue's new fetch limit whenever it changes. */
    private readonly setLimit: (queue: Q, limit: number) => void,
  ) {}

  /** Registers a queue before its worker starts fetching. */
  add(queue: Q): void {
    this.held.set(queue, 0);
    this.setLimit(queue, this.limit(0));
  }

  /** Jobs running now (holding a slot). */
  get running(): number {
    return this.used;
  }

  /** Runs `fn` for a job of `queue` once a slot is free. */
  async run<T>(queue: Q, fn: () => Promise<T>): Promise<T> {
    this.held.set(queue, (this.held.get(queue) ?? 0) + 1);
    this.retune();
    try {
      if (this.used >= this.size) await new Promise<void>((resolve) => this.waiters.push(resolve));
      else this.used++;
      return await fn();
    } finally {
      // A waiter takes the slot over as it is; only with nobody waiting is it freed.
      const next = this.waiters.shift();
      if (next) next();
      else this.used--;
      this.held.set(queue, (this.held.get(queue) ?? 1) - 1);
      this.retune();
    }
  }

  private limit(held: number): number {
    let total = 0;
    for (const n of this.held.values()) total += n;
    return Math.max(1, held + Math.max(0, this.size - total));
  }

  private retune(): void {
    for (const [queue, held] of this.held) this.setLimit(queue, this.limit(held));
  }
}
