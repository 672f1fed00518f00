import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';
import { isConnectionLoss } from '../redis/redis.ts';

/** What a transition asks to hand to BullMQ: [runId, runtime, dispatch number, delay ms, agent]. */
export type DispatchOrder = [string, string, number, number, string];

export interface JobData { scope: string; runId: string; dispatch: number }

/** Lua's cjson encodes an empty list as `{}`; both mean "nothing to dispatch". */
export function parseOrders(orders: DispatchOrder[] | string): DispatchOrder[] {
  const list: unknown = typeof orders === 'string' ? JSON.parse(orders) : orders;
  return Array.isArray(list) ? (list as DispatchOrder[]) : [];
}

export const jobId = (runId: string, dispatch: number) => `${runId}-${dispatch}`;

/**
 * The outbox's second half: adds the BullMQ job a transition asked for. The job id is
 * derived from the run and its dispatch number, so adding the same order twice is a
 * no-op, and a crash before the add is repaired by the sweeper (see sweeper.ts).
 *
 * Runs are routed by agent: each runtime has one queue per agent (Keys.queuePrefix),
 * and a worker takes only from the queues of the agents it serves, so a run never reaches a
 * worker that lacks its agent, and one whose agent no worker serves waits in its queue.
 */
export class Dispatcher {
  private readonly queues = new Map<string, Queue<JobData>>();

  /** `onError`: a queue's errors but the connection's own (those its connection logs, redis.ts). */
  constructor(
    private readonly connection: Redis,
    private readonly keys: Keys,
    private readonly onError?: (err: Error, queue: string) => void,
  ) {}

  /** The queue of `agent`'s runs on `runtime`. */
  queue(runtime: string, agent: string): Queue<JobData> {
    const id = `${runtime}\n${agent}`;
    let q = this.queues.get(id);
    if (!q) {
      q = new Queue<JobData>(agent, { connection: this.connection, prefix: this.keys.queuePrefix(runtime) });
      // Without a listener, BullMQ prints each error of the shared connection as a multi-line dump.
      q.on('error', (err) => { if (!isConnectionLoss(err)) this.onError?.(err, agent); });
      this.queues.set(id, q);
    }
    return q;
  }

  /**
   * BullMQ's job counts by state over `runtime`'s queues: those of the agents its workers
   * served in the last day (the registry's, see WorkerPresence).
   */
  async jobCounts(runtime: string, states: readonly JobState[]): Promise<Record<string, number>> {
    const agents = await this.connection.hkeys(this.keys.runtimeAgents(runtime));
    const sum: Record<string, number> = Object.fromEntries(states.map((s) => [s, 0]));
    const all = await Promise.all(agents.map((a) => this.queue(runtime, a).getJobCounts(...states)));
    for (const counts of all) for (const s of states) sum[s] += counts[s] ?? 0;
    return sum;
  }

  async dispatch(scope: string, orders: DispatchOrder[] | string): Promise<void> {
    const list = parseOrders(orders);
    if (list.length === 0) return;
    await Promise.all(
      list.map(([runId, runtime, dispatch, delay, agent]) =>
        this.queue(runtime, agent).add(
          'run',
          { scope, runId, dispatch },
          {
            jobId: jobId(runId, dispatch),
            delay: delay > 0 ? delay : undefined,
            // The run record keeps the outcome; BullMQ keeps nothing it would have to clean.
            removeOnComplete: true,
            removeOnFail: { age: 24 * 3600, count: 10_000 },
          },
        ),
      ),
    );
  }

  async close(): Promise<void> {
    await Promise.all([...this.queues.values()].map((q) => q.close()));
    this.queues.clear();
  }
}

type JobState = Parameters<Queue['getJobCounts']>[number];
