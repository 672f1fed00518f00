import type { Redis } from 'ioredis';
import type { Config } from '../config.ts';
import type { Dispatcher } from '../engine/dispatcher.ts';
import type { Keys } from '../keys.ts';
import { runScript } from '../engine/scripts.ts';
import type { RuntimeInfo, WorkerRegistry } from './worker-registry.ts';

/**
 * Operator actions on one (scope, runtime) pair: counts, drain and resume. Every key read or
 * written here is under the scope's hash tag, so nothing here can see or touch another
 * scope; the runtime id picks that scope's counters and flag for one runtime only.
 */

export interface RuntimeStats {
  scope: string;
  runtimeId: string;
  /** Current counts by public status (dispatched shows as queued); terminal counts are cumulative. */
  counts: { queued: number; running: number; retrying: number; blocked: number; succeeded: number; failed: number; cancelled: number };
  /** Age of the run that has waited longest to start; null when none waits. */
  oldestQueuedAgeMs: number | null;
  draining: boolean;
  /** Live workers of the runtime (they serve every scope). */
  liveWorkers: number;
}

export interface ScopeRuntime extends RuntimeInfo {
  /** Whether this scope drained the runtime. */
  draining: boolean;
}

export interface DrainResult { scope: string; runtimeId: string; draining: true; cancelled: number }
export interface ResumeResult { scope: string; runtimeId: string; draining: false; resumed: number }

/**
 * Runs handled per script call when cancelling or resuming: each call is one atomic step
 * that keeps Redis responsive (a few ms) even when a drained runtime holds many thousands.
 */
const BATCH = 200;

export class RuntimeAdmin {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly dispatcher: Dispatcher,
    private readonly registry: WorkerRegistry,
  ) {}

  /** The registry's runtimes as one scope sees them: with that scope's drain flag on each. */
  async runtimes(scope: string): Promise<ScopeRuntime[]> {
    const sk = this.keys.scope(scope);
    const list = await this.registry.runtimes();
    const flags = await Promise.all(list.map((rt) => this.redis.exists(sk.drain(rt.runtimeId))));
    return list.map((rt, i) => ({ ...rt, draining: flags[i] === 1 }));
  }

  async stats(scope: string, runtime: string): Promise<RuntimeStats> {
    const sk = this.keys.scope(scope);
    const [counts, oldest, draining, time, live] = await Promise.all([
      this.redis.hgetall(sk.stats(runtime)),
      this.redis.zrange(sk.waiting(runtime), 0, 0, 'WITHSCORES'),
      this.redis.exists(sk.drain(runtime)),
      this.redis.time(),
      this.registry.liveWorkers(runtime),
    ]);
    const n = (status: string) => Math.max(0, Number(counts[status] ?? 0));
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    return {
      scope,
      runtimeId: runtime,
      counts: {
        queued: n('queued') + n('dispatched'),
        running: n('running'),
        retrying: n('retrying'),
        blocked: n('blocked'),
        succeeded: n('succeeded'),
        failed: n('failed'),
        cancelled: n('cancelled'),
      },
      oldestQueuedAgeMs: oldest.length ? Math.max(0, now - Number(oldest[1])) : null,
      draining: draining === 1,
      liveWorkers: live.length,
    };
  }

  /**
   * Stops starting the scope's runs on the runtime; running ones finish. With cancelQueued
   * the scope's waiting runs of that runtime are cancelled too (in batches, each atomic).
   */
  async drain(scope: string, runtime: string, opts: { cancelQueued: boolean }): Promise<DrainResult> {
    const sk = this.keys.scope(scope);
    const c = this.config;
    let cancelled = 0;
    let before = Infinity;
    for (;;) {
      const reply = await runScript(this.redis, 'drain', [sk.drain(runtime)], [
        sk.base, runtime, opts.cancelQueued ? 1 : 0, BATCH, c.EVENTS_MAX_LEN, c.MAX_ACTIVE_PER_SCOPE,
        c.DISPATCH_GRACE_MS, c.RETENTION_MS, this.keys.cancelChannel,
      ]);
      cancelled += Number(reply[0]);
      // Cancelling a session head hands its scope slot on, possibly to another runtime's run.
      await this.dispatcher.dispatch(scope, String(reply[2]));
      const left = Number(reply[1]);
      // The waiting set only shrinks while drained; stop if a call made no progress at all.
      if (!opts.cancelQueued || left === 0 || left >= before) break;
      before = left;
    }
    return { scope, runtimeId: runtime, draining: true, cancelled };
  }

  /** Lifts the drain: parked session heads are admitted again, oldest first. */
  async resume(scope: string, runtime: string): Promise<ResumeResult> {
    const sk = this.keys.scope(scope);
    const c = this.config;
    let resumed = 0;
    for (let first = 1; ; first = 0) {
      const reply = await runScript(this.redis, 'undrain', [sk.drain(runtime)], [
        sk.base, runtime, first, BATCH, c.EVENTS_MAX_LEN, c.MAX_ACTIVE_PER_SCOPE, c.DISPATCH_GRACE_MS,
      ]);
      resumed += Number(reply[0]);
      await this.dispatcher.dispatch(scope, String(reply[2]));
      if (Number(reply[1]) === 0) break;
    }
    return { scope, runtimeId: runtime, draining: false, resumed };
  }
}
