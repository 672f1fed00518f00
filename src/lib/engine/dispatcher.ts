import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';

/** What a transition asks to hand to BullMQ: [runId, runtime, dispatch number, delay ms]. */
export type DispatchOrder = [string, string, number, number];

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
 */
export class Dispatcher {
  private readonly queues = new Map<string, Queue<JobData>>();

  constructor(private readonly connection: Redis, private readonly keys: Keys) {}

  queue(runtime: string): Queue<JobData> {
    let q = this.queues.get(runtime);
    if (!q) {
      q = new Queue<JobData>(runtime, { connection: this.connection, prefix: this.keys.queuePrefix(runtime) });
      this.queues.set(runtime, q);
    }
    return q;
  }

  async dispatch(scope: string, orders: DispatchOrder[] | string): Promise<void> {
    const list = parseOrders(orders);
    if (list.length === 0) return;
    await Promise.all(
      list.map(([runId, runtime, dispatch, delay]) =>
        this.queue(runtime).add(
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
