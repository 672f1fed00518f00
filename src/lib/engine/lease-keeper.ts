import type { Redis } from 'ioredis';
import type { Logger } from '../logger.ts';
import { RunAbort, type AbortReason, type Attempt } from '../transitions/attempt.ts';
import type { WorkerGateway } from '../transitions/attempt-gateway.ts';

export { RunAbort, type AbortReason };

interface Held {
  attempt: Attempt;
  /** Local time of the last successful renewal (or the claim). */
  renewedAt: number;
}

/**
 * Keeps the leases of every run this worker holds: one pipelined heartbeat for all of them
 * each HEARTBEAT_MS (LEASE_MS / 4 by default). A rejected heartbeat (another worker took
 * over) aborts the run's signal; so does a lease that could not be renewed for a whole
 * LEASE_MS (Redis unreachable): past that point another worker may own the run, and the
 * fence would refuse our writes anyway. Cancel requests arrive on a channel within
 * milliseconds, and the heartbeat reply carries them too in case a message was missed.
 */
export class LeaseKeeper {
  private readonly held = new Map<string, Held>();
  private timer: NodeJS.Timeout | undefined;
  /** Set by abortAll: a run claimed after that is aborted at once for the same reason. */
  private stopping: AbortReason | undefined;

  constructor(
    private readonly transitions: WorkerGateway,
    private readonly subscriber: Redis,
    private readonly cancelChannel: string,
    private readonly leaseMs: number,
    private readonly heartbeatMs: number,
    private readonly log: Logger,
  ) {}

  private readonly onMessage = (channel: string, runKey: string) => {
    if (channel === this.cancelChannel) this.held.get(runKey)?.attempt.abort('cancelled');
  };

  async start(): Promise<void> {
    // The subscriber connection is the process's, shared with the API's live streams.
    this.subscriber.on('message', this.onMessage);
    await this.subscriber.subscribe(this.cancelChannel);
    this.timer = setInterval(() => void this.beat(), this.heartbeatMs);
    this.timer.unref();
  }

  hold(attempt: Attempt): void {
    // This process can claim a run it still holds: after a pause past its own lease, BullMQ or
    // the sweeper delivers the run again and the claim recovers it with a higher fence. The
    // older attempt then lost its lease like any other loser and must stop now; it has no
    // heartbeat left that would tell it.
    const prev = this.held.get(attempt.runKey);
    if (prev && prev.attempt.fence < attempt.fence) prev.attempt.abort('lease-lost');
    this.held.set(attempt.runKey, { attempt, renewedAt: Date.now() });
    // Claimed after the shutdown deadline (a delivery that was already on its way): hand it over too.
    if (this.stopping) attempt.abort(this.stopping);
  }

  /** Forgets `attempt`; a newer attempt of the same run keeps its entry. */
  release(attempt: Attempt): void {
    if (this.held.get(attempt.runKey)?.attempt === attempt) this.held.delete(attempt.runKey);
  }

  get size(): number {
    return this.held.size;
  }

  abortAll(reason: AbortReason): void {
    this.stopping = reason;
    for (const h of this.held.values()) h.attempt.abort(reason);
  }

  /** One heartbeat for every held run, in one pipeline (the timer calls it; the bench measures it). */
  async beat(): Promise<void> {
    if (this.held.size === 0) return;
    const runs = [...this.held.values()];
    const replies = await this.transitions.heartbeat(runs.map((h) => h.attempt));
    const now = Date.now();
    runs.forEach((h, i) => {
      const reply = replies[i];
      const { attempt } = h;
      // A run that finished while the beat was in flight is no longer running: not a lost lease.
      if (this.held.get(attempt.runKey) !== h) return;
      switch (reply.kind) {
        case 'failed':
          if (now - h.renewedAt >= this.leaseMs) {
            this.log.warn({ runId: attempt.runId, err: reply.error.message }, 'lease could not be renewed in time; stopping the run');
            attempt.abort('lease-lost');
          }
          return;
        // The attempt closed its run itself (finish, retry, block, hand-over) while the beat was on its way.
        case 'closed':
          return;
        case 'lost':
          this.log.warn({ runId: attempt.runId, fence: attempt.fence }, 'lease lost to another worker');
          attempt.abort('lease-lost');
          return;
        case 'renewed':
          h.renewedAt = now;
          if (reply.cancelRequested) attempt.abort('cancelled');
      }
    });
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.subscriber.off('message', this.onMessage);
    await this.subscriber.unsubscribe(this.cancelChannel).catch(() => {});
  }
}
