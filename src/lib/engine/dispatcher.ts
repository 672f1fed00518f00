import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { MAX_QUEUE_PARTITIONS } from '../config/process.ts';
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
 * The partition of a run's jobs among `partitions`: FNV-1a of its id, so every process (the
 * submit's, the sweeper's) puts a run in the same one, and runs spread evenly.
 */
export function partitionOf(runId: string, partitions: number): number {
  if (partitions <= 1) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < runId.length; i++) h = Math.imul(h ^ runId.charCodeAt(i), 0x01000193);
  return (h >>> 0) % partitions;
}

/** How long a process trusts the runtime's partition count it read before reading it again. */
export const PARTITIONS_TTL_MS = 2_000;
/** Runtimes whose partition count a process keeps at once (read again after a clear). */
const MAX_KNOWN_RUNTIMES = 1_000;

/**
 * The outbox's second half: adds the BullMQ job a transition asked for. The job id is
 * derived from the run and its dispatch number, so adding the same order twice is a
 * no-op, and a crash before the add is repaired by the sweeper (see sweeper.ts).
 *
 * Runs are routed by agent: each runtime has one queue per agent (Keys.queuePrefix),
 * and a worker takes only from the queues of the agents it serves, so a run never reaches a
 * worker that lacks its agent, and one whose agent no worker serves waits in its queue.
 *
 * A runtime's queues may be partitioned (QUEUE_PARTITIONS): each agent's queue is then one
 * queue per partition, each on a Cluster slot of its own, a run's jobs in partitionOf(runId).
 * The count is the runtime's, recorded in Redis (Keys.queuePartitions): a worker raises it to
 * its QUEUE_PARTITIONS when it starts (and consumes them at once) and never lowers it, every
 * other worker reads it again each heartbeat and consumes every partition of it
 * (src/worker/worker.ts), and a dispatch spreads over the count it read at most
 * PARTITIONS_TTL_MS ago: so a job only goes to a partition the worker that raised the count
 * consumes, and the others within a heartbeat.
 */
export class Dispatcher {
  private readonly queues = new Map<string, Queue<JobData>>();
  private readonly partitionCounts = new Map<string, { n: number; at: number }>();

  /** `onError`: a queue's errors but the connection's own (those its connection logs, redis.ts). */
  constructor(
    private readonly connection: Redis,
    private readonly keys: Keys,
    private readonly onError?: (err: Error, queue: string) => void,
  ) {}

  /** The queue of `agent`'s runs on `runtime`, in `partition` (0 is the only one of an unpartitioned runtime). */
  queue(runtime: string, agent: string, partition = 0): Queue<JobData> {
    const id = `${runtime}\n${agent}\n${partition}`;
    let q = this.queues.get(id);
    if (!q) {
      q = new Queue<JobData>(agent, { connection: this.connection, prefix: this.keys.queuePrefix(runtime, partition) });
      // Without a listener, BullMQ prints each error of the shared connection as a multi-line dump.
      q.on('error', (err) => { if (!isConnectionLoss(err)) this.onError?.(err, agent); });
      this.queues.set(id, q);
    }
    return q;
  }

  /**
   * The runtime's partition count: the recorded one, read again once PARTITIONS_TTL_MS old
   * (1 while none is recorded). `fresh`: read it now.
   */
  async partitions(runtime: string, fresh = false): Promise<number> {
    const known = this.partitionCounts.get(runtime);
    if (known && !fresh && Date.now() - known.at < PARTITIONS_TTL_MS) return known.n;
    const score = await this.connection.zscore(this.keys.queuePartitions, runtime);
    const n = Math.min(MAX_QUEUE_PARTITIONS, Math.max(1, Math.floor(Number(score ?? 1)) || 1));
    // Runtimes are named by submits: what is kept of them is bounded, whatever names come.
    if (this.partitionCounts.size >= MAX_KNOWN_RUNTIMES) this.partitionCounts.clear();
    this.partitionCounts.set(runtime, { n, at: Date.now() });
    return n;
  }

  /** Raises the runtime's recorded partition count to `n` (never lowers it); returns the count now. */
  async raisePartitions(runtime: string, n: number): Promise<number> {
    await this.connection.zadd(this.keys.queuePartitions, 'GT', n, runtime);
    return this.partitions(runtime, true);
  }

  /**
   * Where the job of a run's dispatch is and its BullMQ state: its partition's queue first,
   * then the others (a job added before the count was raised stays where it went);
   * `unknown` in its own partition's queue when none has it.
   */
  async findJob(runtime: string, agent: string, runId: string, dispatch: number): Promise<{ queue: Queue<JobData>; state: string }> {
    const n = await this.partitions(runtime);
    const home = partitionOf(runId, n);
    const order = [home, ...Array.from({ length: n }, (_, p) => p).filter((p) => p !== home)];
    for (const p of order) {
      const queue = this.queue(runtime, agent, p);
      const state = await queue.getJobState(jobId(runId, dispatch));
      if (state !== 'unknown') return { queue, state };
    }
    return { queue: this.queue(runtime, agent, home), state: 'unknown' };
  }

  /**
   * BullMQ's job counts by state over `runtime`'s queues: those of the agents its workers
   * served in the last day (the registry's, see WorkerPresence), in every partition.
   */
  async jobCounts(runtime: string, states: readonly JobState[]): Promise<Record<string, number>> {
    const [agents, n] = await Promise.all([this.connection.hkeys(this.keys.runtimeAgents(runtime)), this.partitions(runtime)]);
    const sum: Record<string, number> = Object.fromEntries(states.map((s) => [s, 0]));
    const queues = agents.flatMap((a) => Array.from({ length: n }, (_, p) => this.queue(runtime, a, p)));
    const all = await Promise.all(queues.map((q) => q.getJobCounts(...states)));
    for (const counts of all) for (const s of states) sum[s] += counts[s] ?? 0;
    return sum;
  }

  async dispatch(scope: string, orders: DispatchOrder[] | string): Promise<void> {
    const list = parseOrders(orders);
    if (list.length === 0) return;
    const counts = new Map<string, number>();
    for (const [, runtime] of list) if (!counts.has(runtime)) counts.set(runtime, await this.partitions(runtime));
    await Promise.all(
      list.map(([runId, runtime, dispatch, delay, agent]) =>
        this.queue(runtime, agent, partitionOf(runId, counts.get(runtime)!)).add(
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
