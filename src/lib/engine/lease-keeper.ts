import type { Redis } from 'ioredis';
import type { Logger } from '../logger.ts';
import { runScript } from './scripts.ts';
import { LeaseLostError } from './script-codes.ts';

/** Why a run's signal was aborted. */
export type AbortReason = 'cancelled' | 'lease-lost' | 'shutdown';

export class RunAbort extends Error {
  constructor(readonly reason: AbortReason) {
    super(`run aborted: ${reason}`);
    this.name = 'AbortError';
  }
}

interface Held {
  runKey: string;
  base: string;
  runId: string;
  fence: number;
  controller: AbortController;
  /** Local time of the last successful renewal (or the claim). */
  renewedAt: number;
}

/**
 * Keeps the leases of every run this worker holds: one pipelined heartbeat for all of them
 * each HEARTBEAT_MS (LEASE_MS / 3 by default). A rejected heartbeat (another worker took
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
    private readonly redis: Redis,
    private readonly subscriber: Redis,
    private readonly cancelChannel: string,
    private readonly leaseMs: number,
    private readonly heartbeatMs: number,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.subscriber.on('message', (channel: string, runKey: string) => {
      if (channel === this.cancelChannel) this.held.get(runKey)?.controller.abort(new RunAbort('cancelled'));
    });
    await this.subscriber.subscribe(this.cancelChannel);
    this.timer = setInterval(() => void this.beat(), this.heartbeatMs);
    this.timer.unref();
  }

  hold(runKey: string, base: string, runId: string, fence: number, controller: AbortController): void {
    // This process can claim a run it still holds: after a pause past its own lease, BullMQ or
    // the sweeper delivers the run again and the claim recovers it with a higher fence. The
    // older attempt then lost its lease like any other loser and must stop now; it has no
    // heartbeat left that would tell it.
    const prev = this.held.get(runKey);
    if (prev && prev.fence < fence) prev.controller.abort(new RunAbort('lease-lost'));
    this.held.set(runKey, { runKey, base, runId, fence, controller, renewedAt: Date.now() });
    // Claimed after the shutdown deadline (a delivery that was already on its way): hand it over too.
    if (this.stopping) controller.abort(new RunAbort(this.stopping));
  }

  /** Forgets the attempt holding `fence`; a newer attempt of the same run keeps its entry. */
  release(runKey: string, fence: number): void {
    if (this.held.get(runKey)?.fence === fence) this.held.delete(runKey);
  }

  get size(): number {
    return this.held.size;
  }

  abortAll(reason: AbortReason): void {
    this.stopping = reason;
    for (const h of this.held.values()) h.controller.abort(new RunAbort(reason));
  }

  /** One heartbeat for every held run, in one pipeline (the timer calls it; the bench measures it). */
  async beat(): Promise<void> {
    if (this.held.size === 0) return;
    const runs = [...this.held.values()];
    const pipe = this.redis.pipeline();
    for (const h of runs) {
      (pipe as unknown as Record<string, (...a: unknown[]) => void>).baton_heartbeat_v1(
        h.runKey, h.base, h.runId, h.fence, this.leaseMs,
      );
    }
    let results: [Error | null, unknown][] | null = null;
    try {
      results = await pipe.exec();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'heartbeat failed');
    }
    const now = Date.now();
    runs.forEach((h, i) => {
      // A run that finished while the beat was in flight is no longer running: not a lost lease.
      if (this.held.get(h.runKey) !== h) return;
      const [err, reply] = results?.[i] ?? [new Error('no reply'), null];
      if (err || !Array.isArray(reply)) {
        if (now - h.renewedAt >= this.leaseMs) {
          this.log.warn({ runId: h.runId }, 'lease could not be renewed in time; stopping the run');
          h.controller.abort(new RunAbort('lease-lost'));
        }
        return;
      }
      // The attempt closed its run itself (finish, retry, block, hand-over) while the beat was on its way.
      if (Number(reply[0]) === -3) return;
      if (Number(reply[0]) === -2) {
        this.log.warn({ runId: h.runId, fence: h.fence }, 'lease lost to another worker');
        h.controller.abort(new RunAbort('lease-lost'));
        return;
      }
      h.renewedAt = now;
      if (Number(reply[1]) === 1) h.controller.abort(new RunAbort('cancelled'));
    });
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

export { LeaseLostError };
