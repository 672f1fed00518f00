import { DelayedError, Worker, type Job } from 'bullmq';
import type { Agent } from '../lib/agent.ts';
import type { Config } from '../lib/config.ts';
import { Dispatcher, type JobData } from '../lib/dispatcher.ts';
import { newWorkerId } from '../lib/ids.ts';
import { createKeys } from '../lib/keys.ts';
import { LeaseKeeper } from '../lib/lease-keeper.ts';
import type { Logger } from '../lib/logger.ts';
import { createRedis, waitReady, type Redis } from '../lib/redis.ts';
import { RunExecutor, type ExecutorEvents } from '../lib/run-executor.ts';
import { Sweeper } from '../lib/sweeper.ts';

export interface WorkerOptions {
  config: Config;
  redisUrl: string;
  log: Logger;
  agents: ReadonlyMap<string, Agent>;
  events?: ExecutorEvents;
}

export interface WorkerHandle {
  workerId: string;
  runtime: string;
  redis: Redis;
  /** Runs this process holds right now. */
  readonly inFlight: number;
  /** Stops claiming, lets in-flight runs finish until SHUTDOWN_GRACE_MS, then hands the rest over. Idempotent. */
  close(): Promise<void>;
}

/**
 * A BullMQ worker for one runtime. BullMQ delivers jobs and guards against lost work; the
 * run record decides what a delivery means (see RunExecutor). BullMQ's own stall limit is
 * set out of reach: a stalled job is re-delivered and the claim turns it into a recovery,
 * and should BullMQ ever fail a job the sweeper re-dispatches the run from its record.
 */
export async function startWorker(o: WorkerOptions): Promise<WorkerHandle> {
  const { config: c } = o;
  const runtime = c.RUNTIME;
  const workerId = newWorkerId(runtime);
  const log = o.log.child({ workerId, runtime });
  const keys = createKeys(c.BATON_KEY_PREFIX);
  const redis = createRedis({ url: o.redisUrl, name: `worker-cmd`, logger: log });
  const bullConn = createRedis({ url: o.redisUrl, name: 'worker-bull', logger: log, blocking: true });
  const subscriber = createRedis({ url: o.redisUrl, name: 'worker-sub', logger: log, blocking: true });
  await waitReady(redis);
  const dispatcher = new Dispatcher(bullConn, keys);
  const leases = new LeaseKeeper(redis, subscriber, keys.cancelChannel, c.LEASE_MS, c.HEARTBEAT_MS, log);
  await leases.start();
  const executor = new RunExecutor({
    redis, keys, config: c, dispatcher, leases, agents: o.agents, workerId, log, events: o.events,
  });
  const sweeper = new Sweeper(redis, keys, c, dispatcher, log);

  const worker = new Worker<JobData>(
    runtime,
    async (job: Job<JobData>, token?: string) => {
      const outcome = await executor.execute(job.data);
      if (outcome.kind === 'later') {
        // Come back when the current lease or retry delay ends; BullMQ keeps the job.
        await job.moveToDelayed(Math.max(outcome.at + 50, Date.now() + 50), token);
        throw new DelayedError();
      }
    },
    {
      connection: bullConn,
      prefix: keys.queuePrefix(runtime),
      concurrency: c.WORKER_CONCURRENCY,
      lockDuration: c.LEASE_MS,
      stalledInterval: Math.max(1000, Math.floor(c.LEASE_MS / 2)),
      maxStalledCount: 1_000_000,
      autorun: false,
    },
  );
  worker.on('error', (err) => log.warn({ err: err.message }, 'bullmq worker error'));
  worker.on('failed', (job, err) => log.error({ jobId: job?.id, err: err.message }, 'run delivery failed'));
  void worker.run();
  sweeper.start();
  log.info({ concurrency: c.WORKER_CONCURRENCY, agents: [...o.agents.keys()] }, 'worker started');

  let closing: Promise<void> | undefined;
  return {
    workerId,
    runtime,
    redis,
    get inFlight() { return leases.size; },
    close() {
      closing ??= (async () => {
        log.info({ inFlight: leases.size }, 'worker stopping: no new claims');
        await sweeper.stop();
        const handover = setTimeout(() => leases.abortAll('shutdown'), c.SHUTDOWN_GRACE_MS);
        await worker.close();
        clearTimeout(handover);
        leases.stop();
        await dispatcher.close();
        await Promise.all([redis.quit(), bullConn.quit(), subscriber.quit()].map((p) => p.catch(() => {})));
        log.info('worker stopped');
      })();
      return closing;
    },
  };
}
