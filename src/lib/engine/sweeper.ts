import { isConnectionLoss, redisNowMs, type Redis } from '../redis/redis.ts';
import type { Config } from '../config/index.ts';
import { jobId, type Dispatcher } from './dispatcher.ts';
import type { Keys, ScopeKeys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import type { RunRecord } from '../transitions/record.ts';
import type { AnsweredWait } from '../transitions/reply.ts';
import type { SweeperGateway } from '../transitions/sweeper-gateway.ts';
import { expiredWaitEnd, traceWaitsEnded, tracingEnabled } from '../tracing/tracing.ts';

/** Hooks for metrics: what the sweeper (or a deadline timer of this process) ended. */
export interface SweeperEvents {
  waitsExpired?(runtime: string, waits: readonly AnsweredWait[]): void;
  finished?(run: RunRecord, status: 'expired' | 'failed'): void;
}

/** Deadlines due per scope and sweep: the rest are taken at the next sweep, so one scope cannot stall a pass. */
const TIMERS_PER_SWEEP = 500;
/**
 * Deadlines closer than this get a timer in the process that learnt of them (a parked run's
 * sleep, a delayed submit), so a short sleep takes about its length rather than up to a sweep
 * interval more. Further ones are the sweeper's alone; at most MAX_SOON timers are kept.
 */
const SOON_MS = 60_000;
const MAX_SOON = 10_000;

/**
 * Every how many sweeps (and at the first) the scopes' parked runs are offered free slots
 * (transitions/fill.lua): about once a minute at the default interval. A run's end fills the slot it
 * frees, so slots are left free only under a MAX_ACTIVE_PER_SCOPE raised since runs parked.
 */
const FILL_EVERY_SWEEPS = 60;

/** Calls (of 100 ledger entries each) per scope and pass that take expired runs' bytes off its count. */
const STORAGE_CALLS = 10;

/** The agents a runtime's workers served: agent -> Redis time a live worker last offered it (WorkerPresence). */
type ServedAgents = (runtime: string) => Promise<Map<string, number>>;

/** States in which a BullMQ job still stands for the run. */
const LIVE_JOB_STATES = new Set(['waiting', 'active', 'delayed', 'prioritized', 'waiting-children']);

/**
 * Leader-free repair, run by every API and worker process: two processes repairing the
 * same run is harmless because each repair is a script that re-checks the run's state, its
 * score and its dispatch number, and job ids are derived from that number.
 *
 * - leases, the runs handed out, whose score passed:
 *   - a dispatched or retrying run whose job does not exist (crash between the transition
 *     and the add, a job deleted by hand, a BullMQ job failed after too many stalls) gets a new job;
 *   - a running run whose lease deadline passed (its worker died, and BullMQ has no job that
 *     would deliver it) gets a job, whose claim takes the lease over;
 *   - a dispatched run whose agent no live worker of its runtime served for AGENT_GRACE_MS
 *     fails UNKNOWN_AGENT, and its job goes.
 * - timers: deadlines kept in each scope's `timers` zset: wait timeouts and sleeps, scheduled
 *   runs coming due, ttlMs and timeoutMs running out. They are enforced here because no
 *   process need be alive at the moment: whichever sweeps first afterwards acts. Each is a
 *   script that re-checks the run, so early, late or repeated calls are harmless.
 */
export class Sweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly soonTimers = new Map<string, NodeJS.Timeout>();
  private stopped = false;
  private sweeps = 0;
  repaired = 0;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly dispatcher: Dispatcher,
    private readonly transitions: SweeperGateway,
    private readonly log: Logger,
    private readonly events: SweeperEvents = {},
  ) {}

  /**
   * A deadline this process just set (`member` of the scope's timers, due at `at`, Redis
   * time): when it is near, act on it at its moment instead of at the next sweep.
   */
  soon(scope: string, member: string, at: number): void {
    const delay = at - Date.now();
    const id = `${scope} ${member}`;
    if (this.stopped || delay > SOON_MS || this.soonTimers.has(id) || this.soonTimers.size >= MAX_SOON) return;
    const timer = setTimeout(() => {
      this.soonTimers.delete(id);
      this.timer1(scope, member).catch((err) => this.log.warn({ err: (err as Error).message, scope, member }, 'deadline timer failed; the sweeper takes it'));
    }, Math.max(0, delay) + 5);
    timer.unref();
    this.soonTimers.set(id, timer);
  }

  start(): void {
    if (this.config.SWEEP_INTERVAL_MS === 0) return;
    // Jitter the first sweep so processes started together do not sweep in lockstep.
    const first = Math.floor(Math.random() * this.config.SWEEP_INTERVAL_MS);
    this.timer = setTimeout(() => this.loop(), first);
    this.timer.unref();
  }

  private loop(): void {
    this.running = this.sweep()
      .then(() => undefined)
      // Redis away: its connection says so once (redis.ts), not each sweep.
      .catch((err) => { if (!isConnectionLoss(err)) this.log.warn({ err: (err as Error).message }, 'sweep failed'); })
      .finally(() => {
        this.running = undefined;
        if (this.timer) {
          this.timer = setTimeout(() => this.loop(), this.config.SWEEP_INTERVAL_MS);
          this.timer.unref();
        }
      });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const t of this.soonTimers.values()) clearTimeout(t);
    this.soonTimers.clear();
    await this.running;
  }

  /** One full pass over every scope; returns how many runs it re-dispatched. */
  async sweep(): Promise<number> {
    const now = await redisNowMs(this.redis);
    const fill = this.sweeps % FILL_EVERY_SWEEPS === 0;
    this.sweeps++;
    let count = 0;
    let cursor = '0';
    // Read once per sweep and runtime, when a waiting run asks.
    const agentsOf = new Map<string, Promise<Map<string, number>>>();
    const served: ServedAgents = (runtime) => {
      let known = agentsOf.get(runtime);
      if (!known) {
        known = this.redis.hgetall(this.keys.runtimeAgents(runtime))
          .then((raw) => new Map(Object.entries(raw).map(([a, at]) => [a, Number(at)])));
        agentsOf.set(runtime, known);
      }
      return known;
    };
    do {
      const [next, scopes] = await this.redis.sscan(this.keys.scopes, cursor, 'COUNT', 200);
      cursor = next;
      for (const scope of scopes) count += await this.sweepScope(scope, now, served);
      if (fill) {
        await this.fillSlots(scopes);
        await this.trimStorage(scopes);
      }
    } while (cursor !== '0');
    this.repaired += count;
    return count;
  }

  /** Those of `scopes` where the key `key` names exists (one pipelined EXISTS each). */
  private async scopesWith(scopes: readonly string[], key: (sk: ScopeKeys) => string): Promise<string[]> {
    if (scopes.length === 0) return [];
    const pipe = this.redis.pipeline();
    for (const scope of scopes) pipe.exists(key(this.keys.scope(scope)));
    const found = (await pipe.exec()) ?? [];
    return scopes.filter((_, i) => {
      const [err, n] = found[i] ?? [];
      if (err) throw err;
      return Number(n) > 0;
    });
  }

  /** Offers free slots to the parked runs of those of `scopes` that have any. */
  private async fillSlots(scopes: readonly string[]): Promise<void> {
    const parked = new Set([...await this.scopesWith(scopes, (sk) => sk.ready), ...await this.scopesWith(scopes, (sk) => sk.legacyReady)]);
    for (const scope of parked) {
      if (await this.transitions.fill(scope)) this.log.info({ scope }, 'parked runs given free slots');
    }
  }

  /**
   * Takes expired runs' bytes off the stored bytes of those of `scopes` that keep any (submits
   * and forks do it as they check; this keeps the limits answer true while a scope is idle), up
   * to STORAGE_CALLS calls of 100 entries each per scope and pass.
   */
  private async trimStorage(scopes: readonly string[]): Promise<void> {
    for (const scope of await this.scopesWith(scopes, (sk) => sk.storageLedger)) {
      for (let i = 0; i < STORAGE_CALLS; i++) {
        if (!(await this.transitions.trimStorage(scope)).more) break;
      }
    }
  }

  private async sweepScope(scope: string, now: number, served: ServedAgents): Promise<number> {
    const sk = this.keys.scope(scope);
    let count = 0;
    for (const runId of await this.redis.zrangebyscore(sk.leases, '-inf', now, 'LIMIT', 0, 500)) {
      const [status, dispatch, runtime, agent, createdAt, runAt] =
        await this.redis.hmget(sk.run(runId), 'status', 'dispatch', 'runtime', 'agent', 'createdAt', 'runAt');
      if (status === null) {
        // Past its retention: nothing can bring the run back.
        await this.redis.zrem(sk.leases, runId);
        continue;
      }
      let job: { dispatch: number; alive: boolean } | undefined;
      if ((status === 'dispatched' || status === 'retrying') && dispatch && runtime && agent) {
        const { queue, state } = await this.dispatcher.findJob(runtime, agent, runId, Number(dispatch));
        job = { dispatch: Number(dispatch), alive: LIVE_JOB_STATES.has(state) };
        // Waiting for a worker that serves its agent: since the later of its submit (or due
        // time) and when such a worker was last seen.
        if (status === 'dispatched' && job.alive && state !== 'active') {
          const lastServed = (await served(runtime)).get(agent) ?? 0;
          const since = Math.max(lastServed + this.config.LEASE_MS, Number(createdAt ?? 0), Number(runAt ?? 0));
          if (lastServed + this.config.LEASE_MS <= now && now - since >= this.config.AGENT_GRACE_MS) {
            const message = `no live worker of runtime "${runtime}" served agent "${agent}" for ${Math.round((now - since) / 1000)} s (AGENT_GRACE_MS)`;
            const run = await this.transitions.unserved(scope, runId, job.dispatch, message);
            if (run) {
              // Its job would wait in a queue nobody reads: it goes (a job a worker took meanwhile stays).
              await queue.remove(jobId(runId, job.dispatch)).catch(() => undefined);
              this.log.warn({ scope, runId, runtime, agent }, 'run failed: no worker serves its agent');
              this.events.finished?.(run, 'failed');
              continue;
            }
          }
        }
      }
      if (await this.transitions.repair(scope, runId, job)) {
        count += this.repaired1(scope, runId, status === 'running' ? 'lease expired' : 'dispatch lost');
      }
    }
    // One range read per scope: a scope with no deadline due costs nothing more.
    for (const member of await this.redis.zrangebyscore(sk.timers, '-inf', now, 'LIMIT', 0, TIMERS_PER_SWEEP)) {
      await this.timer1(scope, member);
    }
    return count;
  }

  /** Acts on one deadline of a scope's timers (`<what>:<runId>`). */
  private async timer1(scope: string, member: string): Promise<void> {
    const at = member.indexOf(':');
    const what = member.slice(0, at);
    const runId = member.slice(at + 1);
    switch (what) {
      case 'wait': {
        const { answered, runtime } = await this.transitions.waitTimeout(scope, runId);
        if (answered.length) this.events.waitsExpired?.(runtime, answered);
        // The waits' spans, children of the run's trace context (read only when traced).
        if (answered.length && tracingEnabled()) {
          const traceparent = await this.redis.hget(this.keys.scope(scope).run(runId), 'traceparent');
          traceWaitsEnded(traceparent ?? undefined, runId, answered, (w) => expiredWaitEnd(w.kind));
        }
        return;
      }
      case 'due':
        await this.transitions.runDue(scope, runId);
        return;
      case 'ttl': {
        const run = await this.transitions.expire(scope, runId);
        if (run) this.events.finished?.(run, 'expired');
        return;
      }
      case 'timeout': {
        const run = await this.transitions.timeOut(scope, runId);
        if (run) this.events.finished?.(run, 'failed');
        return;
      }
      default:
        // Not a member any version of Baton writes: drop it rather than meet it every sweep.
        this.log.warn({ scope, member }, 'unknown deadline entry removed');
        await this.redis.zrem(this.keys.scope(scope).timers, member);
    }
  }

  private repaired1(scope: string, runId: string, why: string): number {
    this.log.warn({ scope, runId, why }, 'sweeper re-dispatched a run');
    return 1;
  }
}
