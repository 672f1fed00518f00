import { DelayedError, Worker, type Job } from 'bullmq';
import type { Agent } from '../lib/sdk/agent.ts';
import type { Config } from '../lib/config/index.ts';
import type { JobData } from '../lib/engine/dispatcher.ts';
import { redisCheck, workerCheck, type ReadinessCheck } from '../lib/ops/health.ts';
import { newWorkerId } from '../lib/ids.ts';
import { LeaseKeeper } from '../lib/engine/lease-keeper.ts';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import { composeHooks } from '../lib/hooks.ts';
import { isConnectionLoss, type Redis } from '../lib/redis/redis.ts';
import { openResources, type Resources } from '../lib/process/resources.ts';
import { RunExecutor, type ExecutorEvents } from '../lib/engine/executor.ts';
import { withTimeout } from '../lib/timeout.ts';
import { WorkerPresence } from '../lib/engine/flow/worker-registry.ts';
import { startOpsServer, type OpsServer } from './ops-server.ts';
import { Slots } from './slots.ts';

export type WorkerOptions = (
  /** The process's composition root (`baton start` shares one with its API). */
  | { resources: Resources }
  /** Standalone: the worker opens (and closes) its own. */
  | { config: Config; redisUrl: string; log: Logger; metrics?: Metrics }
) & {
  agents: ReadonlyMap<string, Agent>;
  /** The caller's own hooks on the executor (tests observe it through them), called after the metrics'. */
  events?: ExecutorEvents;
  /**
   * Serve /metrics, /healthz, /readyz on METRICS_PORT. Default: on for a standalone worker
   * (`config` and `redisUrl` given), off when `resources` is passed: the composition root's
   * owner serves that registry (`baton start` on its API port, with this worker's readiness
   * checks; an app embedding `createBatonRouter` on its own `/metrics`), so an embedded worker
   * opens no port of its own.
   */
  opsServer?: boolean;
};

export interface WorkerHandle {
  workerId: string;
  runtime: string;
  redis: Redis;
  /** Runs this process holds right now. */
  readonly inFlight: number;
  metrics: Metrics;
  /** Where /metrics, /healthz, /readyz answer (undefined with opsServer: false). */
  opsUrl: string | undefined;
  /** The bound METRICS_PORT (the free port picked when it was 0). */
  metricsPort: number | undefined;
  /** Redis answers and this worker is registered on its queue (what /readyz reports). */
  readonly checks: readonly ReadinessCheck[];
  /** Stops claiming, lets in-flight runs finish until SHUTDOWN_GRACE_MS, then hands the rest over. Idempotent. */
  close(): Promise<void>;
}

/**
 * A BullMQ worker for one runtime. BullMQ delivers jobs and guards against lost work; the
 * run record decides what a delivery means (see RunExecutor). BullMQ's own stall limit is
 * set out of reach: a stalled job is re-delivered and the claim turns it into a recovery,
 * and should BullMQ ever fail a job the sweeper re-dispatches the run from its record.
 */
/** After the hand-over, how long BullMQ may take to let go of its jobs before it is forced. */
const FORCE_CLOSE_AFTER_HANDOVER_MS = 5_000;

export async function startWorker(o: WorkerOptions): Promise<WorkerHandle> {
  // A worker takes runs from its agents' queues only: with none it could never take one.
  if (o.agents.size === 0) throw new Error('a worker needs at least one agent');
  const res = 'resources' in o ? o.resources : await openResources({ ...o, role: 'worker' });
  const owned = !('resources' in o);
  const { config: c, redis, keys, metrics, dispatcher, gateways, registry } = res;
  const runtime = c.RUNTIME;
  const workerId = newWorkerId(runtime);
  const log = res.log.child({ workerId, runtime });
  const leases = new LeaseKeeper(gateways.worker, res.subscriber, keys.cancelChannel, c.LEASE_MS, c.HEARTBEAT_MS, log);
  await leases.start();
  const executor = new RunExecutor({
    redis, keys, config: c, transitions: gateways.worker, flow: gateways.flow, leases, agents: o.agents, workerId, log,
    schemaGuard: res.schemaGuard, artifacts: res.artifacts,
    events: composeHooks<ExecutorEvents>(metrics.executorEvents(runtime), o.events),
    waitTokens: res.waitTokens,
    rateLimits: res.rateLimits,
    wakeAt: (scope, runId, at) => res.sweeper.soon(scope, `wait:${runId}`, at),
  });
  metrics.initRuntime(runtime, o.agents.keys());
  res.watchRuntime(runtime);
  const stopInFlight = metrics.watchInFlight(runtime, () => leases.size);
  // Registered before the first claim: the API accepts this worker's agents from now on.
  const presence = new WorkerPresence(
    redis, keys,
    { workerId, runtime, agents: [...o.agents.keys()], descriptions: descriptionsOf(o.agents.values()), concurrency: c.WORKER_CONCURRENCY },
    { beatMs: c.HEARTBEAT_MS, liveMs: c.LEASE_MS, log },
  );
  await presence.start();

  let closing: Promise<void> | undefined;
  // One BullMQ worker per agent served and queue partition: runs are routed by agent and
  // spread over the runtime's partitions (see Dispatcher), and the process's
  // WORKER_CONCURRENCY is shared by them all (Slots).
  const bullWorkers = new Map<string, Worker<JobData>>();
  const slots = new Slots<string>(c.WORKER_CONCURRENCY, (queue, limit) => {
    const w = bullWorkers.get(queue);
    if (w && w.concurrency !== limit) w.concurrency = limit;
  });
  const consume = (agent: string, partition: number) => {
    const queue = `${agent}#${partition}`;
    const worker = new Worker<JobData>(
      agent,
      (job: Job<JobData>, token?: string) => slots.run(queue, async () => {
        // BullMQ may hand over a job it fetched just as close() was called: it goes back to the
        // queue unclaimed, for a worker that stays, so nothing starts here once closing began
        // (a reload under `baton start --watch` promises the runs after it the new code).
        if (closing) {
          await job.moveToDelayed(Date.now(), token);
          throw new DelayedError();
        }
        const outcome = await executor.execute(job.data);
        if (outcome.kind === 'later') {
          // Come back when the current lease or retry delay ends; BullMQ keeps the job.
          await job.moveToDelayed(Math.max(outcome.at + 50, Date.now() + 50), token);
          throw new DelayedError();
        }
      }),
      {
        connection: res.bull,
        prefix: keys.queuePrefix(runtime, partition),
        // BullMQ names the worker's Redis client after it: /readyz finds this worker by it.
        name: workerId,
        concurrency: c.WORKER_CONCURRENCY,
        lockDuration: c.LEASE_MS,
        stalledInterval: Math.max(1000, Math.floor(c.LEASE_MS / 2)),
        maxStalledCount: 1_000_000,
        autorun: false,
      },
    );
    // A Redis that went away shows here once per retry of each of the worker's connections
    // (hundreds a minute): the connections log it once when lost and once when back (redis.ts).
    worker.on('error', (err) => {
      if (!isConnectionLoss(err)) log.warn({ err: err.message, agent, partition }, 'bullmq worker error');
    });
    worker.on('failed', (job, err) => log.error({ jobId: job?.id, agent, partition, err: err.message }, 'run delivery failed'));
    bullWorkers.set(queue, worker);
    slots.add(queue);
    void worker.run();
  };
  // The runtime's partitions: raised to this worker's QUEUE_PARTITIONS, and read again every
  // heartbeat, so a count another worker raised is consumed here too within a beat.
  let partitions = 0;
  const widen = (n: number) => {
    for (; partitions < n && !closing; partitions++) for (const agent of o.agents.keys()) consume(agent, partitions);
  };
  widen(await dispatcher.raisePartitions(runtime, c.QUEUE_PARTITIONS));
  const rereadPartitions = setInterval(() => {
    dispatcher.partitions(runtime, true).then(widen, (err: Error) => {
      if (!isConnectionLoss(err)) log.warn({ err: err.message }, 'reading the queue partitions failed');
    });
  }, c.HEARTBEAT_MS);

  let ops: OpsServer | undefined;
  const checks = [redisCheck(redis), workerCheck({
    // Any of its queues: the worker's BullMQ workers are all named after it.
    queue: dispatcher.queue(runtime, [...o.agents.keys()][0]),
    workerId,
    closing: () => closing !== undefined,
    registered: async () => (await registry.liveWorkers(runtime)).some((w) => w.workerId === workerId),
  })];
  const handle: WorkerHandle = {
    workerId,
    runtime,
    redis,
    get inFlight() { return leases.size; },
    metrics,
    get opsUrl() { return ops?.url; },
    get metricsPort() { return ops?.port; },
    checks,
    close() {
      closing ??= (async () => {
        log.info({ inFlight: leases.size }, 'worker stopping: no new claims');
        clearInterval(rereadPartitions);
        // BullMQ stops fetching as soon as close() is called; it resolves once in-flight runs
        // ended. The grace period counts from here, not from after the bookkeeping below.
        const drained = Promise.all([...bullWorkers.values()].map((w) => w.close()));
        const handover = setTimeout(() => leases.abortAll('shutdown'), c.SHUTDOWN_GRACE_MS);
        await presence.stop();
        // Shutdown is bounded: runs were handed over at the grace deadline, so if BullMQ still
        // waits after that (a job whose completion is stuck behind a Redis reconnect), force
        // it. Nothing is lost: the run record, not the BullMQ job, says what is left to do.
        const forceAt = c.SHUTDOWN_GRACE_MS + FORCE_CLOSE_AFTER_HANDOVER_MS;
        if ((await withTimeout(drained, forceAt)) === 'timeout') {
          log.warn({ afterMs: forceAt }, 'bullmq worker did not close in time; forcing it');
          await withTimeout(Promise.all([...bullWorkers.values()].map((w) => w.close(true))), FORCE_CLOSE_AFTER_HANDOVER_MS);
        }
        clearTimeout(handover);
        await leases.stop();
        stopInFlight();
        if (owned) await res.close();
        // Last: /readyz said "stopping" and Prometheus could scrape the grace period.
        await ops?.close();
        log.info('worker stopped');
      })();
      return closing;
    },
  };
  if (o.opsServer ?? owned) {
    try {
      ops = await startOpsServer({ host: c.HOST, port: c.METRICS_PORT, metrics, checks, log, token: c.METRICS_TOKEN });
    } catch (err) {
      await handle.close();
      throw err;
    }
  }
  log.info({ concurrency: c.WORKER_CONCURRENCY, agents: [...o.agents.keys()], partitions, ops: ops?.url }, 'worker started');
  return handle;
}

/** The descriptions of the agents that have one, for the worker's registration (MCP's tool list reads them). */
function descriptionsOf(agents: Iterable<Agent>): Record<string, string> {
  return Object.fromEntries([...agents].flatMap((a) => (a.description === undefined ? [] : [[a.name, a.description]])));
}
