import { redisNowMs, type Redis } from '../redis/redis.ts';
import type { Keys } from '../keys.ts';
import type { DrainResult, ResumeResult, RuntimeStats } from '../contract/admin.ts';
import type { ApiGateway } from '../transitions/api-gateway.ts';
import { runtimeCounts } from './runtime-counts.ts';
import type { RuntimeInfo, WorkerRegistry } from '../engine/flow/worker-registry.ts';

/**
 * Operator actions on one (scope, runtime) pair: counts, drain and resume. Every key read or
 * written here is under the scope's hash tag, so nothing here can see or touch another
 * scope; the runtime id picks that scope's counters and flag for one runtime only.
 */

export interface ScopeRuntime extends RuntimeInfo {
  /** Whether this scope drained the runtime. */
  draining: boolean;
}

/**
 * Runs handled per script call when cancelling or resuming: each call is one atomic step
 * that keeps Redis responsive (a few ms) even when a drained runtime holds many thousands.
 */
const BATCH = 200;

/** Waiting runs whose agents stats looks at for unservedAgents: the oldest, a bounded read. */
const UNSERVED_LOOK = 1_000;

export class RuntimeAdmin {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly transitions: ApiGateway,
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
    const [moves, oldest, draining, now, live] = await Promise.all([
      this.redis.hgetall(sk.stats(runtime)),
      this.redis.zrange(sk.waiting(runtime), 0, 0, 'WITHSCORES'),
      this.redis.exists(sk.drain(runtime)),
      redisNowMs(this.redis),
      this.registry.liveWorkers(runtime),
    ]);
    // `dispatched` is internal: the API shows those runs as queued.
    const { dispatched, ...counts } = runtimeCounts(moves);
    const served = new Set(live.flatMap((w) => w.agents));
    return {
      scope,
      runtimeId: runtime,
      counts: { ...counts, queued: counts.queued + dispatched },
      oldestQueuedAgeMs: oldest.length ? Math.max(0, now - Number(oldest[1])) : null,
      draining: draining === 1,
      liveWorkers: live.length,
      unservedAgents: oldest.length ? await this.unservedAgents(scope, runtime, served, now) : [],
    };
  }

  /**
   * The agents of the scope's runs waiting to start on `runtime` that no live worker serves
   * (their runs wait for one: see AGENT_GRACE_MS), among the UNSERVED_LOOK longest waiting.
   */
  private async unservedAgents(scope: string, runtime: string, served: ReadonlySet<string>, now: number): Promise<RuntimeStats['unservedAgents']> {
    const sk = this.keys.scope(scope);
    const waiting = await this.redis.zrange(sk.waiting(runtime), 0, UNSERVED_LOOK - 1, 'WITHSCORES');
    const pipe = this.redis.pipeline();
    for (let i = 0; i < waiting.length; i += 2) pipe.hget(sk.run(waiting[i]), 'agent');
    const agents = (await pipe.exec()) ?? [];
    const byAgent = new Map<string, { agent: string; runs: number; oldestAgeMs: number }>();
    agents.forEach(([err, agent], i) => {
      if (err || typeof agent !== 'string' || served.has(agent)) return;
      const row = byAgent.get(agent) ?? { agent, runs: 0, oldestAgeMs: Math.max(0, now - Number(waiting[2 * i + 1])) };
      row.runs++;
      byAgent.set(agent, row);
    });
    return [...byAgent.values()].sort((a, b) => b.oldestAgeMs - a.oldestAgeMs);
  }

  /**
   * Stops starting the scope's runs on the runtime; running ones finish. With cancelQueued
   * the scope's waiting runs of that runtime are cancelled too (in batches, each atomic).
   */
  async drain(scope: string, runtime: string, opts: { cancelQueued: boolean }): Promise<DrainResult> {
    let cancelled = 0;
    let before = Infinity;
    for (;;) {
      const step = await this.transitions.scope(scope).drain(runtime, { cancelQueued: opts.cancelQueued, batch: BATCH });
      cancelled += step.cancelled;
      const left = step.left;
      // The waiting set only shrinks while drained; stop if a call made no progress at all.
      if (!opts.cancelQueued || left === 0 || left >= before) break;
      before = left;
    }
    return { scope, runtimeId: runtime, draining: true, cancelled };
  }

  /** Lifts the drain: parked session heads are admitted again, oldest first. */
  async resume(scope: string, runtime: string): Promise<ResumeResult> {
    let resumed = 0;
    for (let first = true; ; first = false) {
      const step = await this.transitions.scope(scope).undrain(runtime, { first, batch: BATCH });
      resumed += step.resumed;
      if (step.left === 0) break;
    }
    return { scope, runtimeId: runtime, draining: false, resumed };
  }
}
