import type { Logger } from '../logger.ts';
import { isConnectionLoss } from './redis.ts';

/**
 * A pass repeated every `intervalMs` in the background, one at a time, by a process that does
 * not hold itself open for it: the schedules' and the bulk operations' loops, which every API
 * and worker process runs. The first pass comes at a random point of the first interval, so
 * processes started together do not poll in step. A pass that fails is logged as `what` and
 * the next one comes as usual. `intervalMs` 0: never started.
 */
export class PollLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly intervalMs: number,
    private readonly pass: () => Promise<void>,
    private readonly log: Logger,
    private readonly what: string,
  ) {}

  start(): void {
    if (this.intervalMs === 0) return;
    this.schedule(Math.floor(Math.random() * this.intervalMs));
  }

  /** Stops the loop; resolves once a pass in progress has ended. */
  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => this.run(), ms);
    this.timer.unref();
  }

  private run(): void {
    this.running = this.pass()
      // Redis away: its connection says so once (redis.ts), not each pass.
      .catch((err) => { if (!isConnectionLoss(err)) this.log.warn({ err: (err as Error).message }, `${this.what} failed`); })
      .finally(() => {
        this.running = undefined;
        if (this.timer) this.schedule(this.intervalMs);
      });
  }
}
