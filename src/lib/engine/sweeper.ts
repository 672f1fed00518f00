import { redisNowMs, type Redis } from '../redis.ts';
import type { Config } from '../config.ts';
import { jobId, type Dispatcher } from './dispatcher.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import type { Transitions } from './transitions.ts';

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
    private readonly transitions: Transitions,
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
    const now = await redisNowMs(this.redis);
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
    let count = 0;
    const expired = await this.redis.zrangebyscore(sk.leases, '-inf', now, 'LIMIT', 0, 500);
    for (const runId of expired) {
      if (await this.transitions.repairLease(scope, runId)) count += this.repaired1(scope, runId, 'lease expired');
    }
    const due = await this.redis.zrangebyscore(sk.pending, '-inf', now, 'LIMIT', 0, 500);
    for (const runId of due) {
      const meta = await this.redis.hmget(sk.run(runId), 'dispatch', 'runtime');
      if (!meta[0] || !meta[1]) {
        await this.redis.zrem(sk.pending, runId);
        continue;
      }
      const state = await this.dispatcher.queue(meta[1]).getJobState(jobId(runId, Number(meta[0])));
      if (await this.transitions.repairPending(scope, runId, Number(meta[0]), LIVE_JOB_STATES.has(state))) {
        count += this.repaired1(scope, runId, 'dispatch lost');
      }
    }
    return count;
  }

  private repaired1(scope: string, runId: string, why: string): number {
    this.log.warn({ scope, runId, why }, 'sweeper re-dispatched a run');
    return 1;
  }
}
