import type { Redis } from 'ioredis';
import type { Config } from '../config.ts';
import { jobId, type Dispatcher } from './dispatcher.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import { runScript } from './scripts.ts';

/** States in which a BullMQ job still stands for the run. */
const LIVE_JOB_STATES = new Set(['waiting', 'active', 'delayed', 'prioritized', 'waiting-children']);

/**
 * Leader-free repair, run by every API and worker process: two processes repairing the
 * same run is harmless because each repair is a script that re-checks the run's state and
 * dispatch number, and job ids are derived from that number.
 *
 * - pending: a run handed to BullMQ whose job does not exist (crash between the transition
 *   and the add, a job deleted by hand, a BullMQ job failed after too many stalls) gets a new job.
 * - leases: a running run whose lease deadline passed (its worker died, and BullMQ has no job
 *   that would deliver it) gets a job, whose claim takes the lease over.
 */
export class Sweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  repaired = 0;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly dispatcher: Dispatcher,
    private readonly log: Logger,
  ) {}

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
      .catch((err) => this.log.warn({ err: (err as Error).message }, 'sweep failed'))
      .finally(() => {
        this.running = undefined;
        if (this.timer) {
          this.timer = setTimeout(() => this.loop(), this.config.SWEEP_INTERVAL_MS);
          this.timer.unref();
        }
      });
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One full pass over every scope; returns how many runs it re-dispatched. */
  async sweep(): Promise<number> {
    const [secs, micros] = await this.redis.time();
    const now = Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
    let count = 0;
    let cursor = '0';
    do {
      const [next, scopes] = await this.redis.sscan(this.keys.scopes, cursor, 'COUNT', 200);
      cursor = next;
      for (const scope of scopes) count += await this.sweepScope(scope, now);
    } while (cursor !== '0');
    this.repaired += count;
    return count;
  }

  private async sweepScope(scope: string, now: number): Promise<number> {
    const sk = this.keys.scope(scope);
    const c = this.config;
    let count = 0;
    const expired = await this.redis.zrangebyscore(sk.leases, '-inf', now, 'LIMIT', 0, 500);
    for (const runId of expired) {
      const reply = await runScript(this.redis, 'repair', [sk.run(runId)], [sk.base, runId, 'lease', 0, c.DISPATCH_GRACE_MS, 'missing']);
      count += await this.dispatchRepair(scope, runId, String(reply[1]), 'lease expired');
    }
    const due = await this.redis.zrangebyscore(sk.pending, '-inf', now, 'LIMIT', 0, 500);
    for (const runId of due) {
      const meta = await this.redis.hmget(sk.run(runId), 'dispatch', 'runtime');
      if (!meta[0] || !meta[1]) {
        await this.redis.zrem(sk.pending, runId);
        continue;
      }
      const state = await this.dispatcher.queue(meta[1]).getJobState(jobId(runId, Number(meta[0])));
      const alive = LIVE_JOB_STATES.has(state) ? 'alive' : 'missing';
      const reply = await runScript(this.redis, 'repair', [sk.run(runId)], [
        sk.base, runId, 'pending', meta[0], c.DISPATCH_GRACE_MS, alive,
      ]);
      count += await this.dispatchRepair(scope, runId, String(reply[1]), 'dispatch lost');
    }
    return count;
  }

  private async dispatchRepair(scope: string, runId: string, orders: string, why: string): Promise<number> {
    if (orders === '[]' || orders === '{}') return 0;
    this.log.warn({ scope, runId, why }, 'sweeper re-dispatched a run');
    await this.dispatcher.dispatch(scope, orders);
    return 1;
  }
}
