import { expect, it } from 'vitest';
import { formatReport, runSoak } from '../bench/soak.ts';

/**
 * The shortened chaos soak (`npm run soak` runs the long one): real `baton api` and
 * `baton worker` processes SIGKILLed and restarted, redis-server SIGKILLed and restarted
 * (append-only, fsync always), while sessions in two scopes submit, stream and poll runs
 * and the driver answers each run's wait and approval at random moments. Flow control is in the
 * mix: operator limits on the scopes (one at a time and one per key; three at twice the
 * weight), priorities and concurrency keys on the runs, and no slot may stay counted at the end.
 * The runtime's queues are split in two (QUEUE_PARTITIONS), so runs go through both
 * partitions while workers die; the Sentinel soak below keeps the one queue of the default.
 * Every figure is printed; only the checks are asserted.
 */
it('under worker, API and Redis kills no accepted run is lost or duplicated, no side effect repeats, no history or stream is corrupted', async () => {
  const report = await runSoak({
    durationMs: 30_000,
    scopes: 2,
    sessionsPerScope: 2,
    workers: 2,
    apis: 2,
    workerKillEveryMs: 6_000,
    apiKillEveryMs: 8_000,
    redisRestartEveryMs: 9_000,
    settleTimeoutMs: 45_000,
    queuePartitions: 2,
    log: (line) => console.log(line),
  });
  console.log(`chaos soak (shortened)\n${formatReport(report)}`);
  expect(report.violations).toEqual([]);
  expect(report.workerKills).toBeGreaterThan(0);
  expect(report.apiKills).toBeGreaterThan(0);
  expect(report.redisRestarts).toBeGreaterThan(0);
  expect(report.runs).toBeGreaterThan(10);
  expect(report.succeeded).toBe(report.runs);
  expect(report.streamsChecked).toBeGreaterThan(0);
  // The checker holds every succeeded run's confirmation and approval to the values sent; some went through a token.
  expect(report.waitsResumed).toBeGreaterThan(0);
  expect(report.tokenResumes).toBeGreaterThan(0);
}, 240_000);

/**
 * The same soak on a primary, two replicas and three Sentinels with REDIS_MIN_REPLICAS_ACK=1:
 * the chaos SIGKILLs the primary instead of restarting Redis, a replica is promoted and the
 * killed node rejoins as a replica; no Baton process is restarted for it. `npm run soak` with
 * SOAK_REDIS=sentinel runs the long one (and with SOAK_MIN_REPLICAS_ACK=0 measures what is lost).
 */
it('through primary failovers with replica-acknowledged writes, no accepted run is lost and nothing is corrupted', async () => {
  const report = await runSoak({
    durationMs: 25_000,
    scopes: 2,
    sessionsPerScope: 2,
    workers: 2,
    apis: 2,
    workerKillEveryMs: 8_000,
    apiKillEveryMs: 10_000,
    redisRestartEveryMs: 10_000,
    settleTimeoutMs: 45_000,
    redisMode: 'sentinel',
    minReplicasAck: 1,
    log: (line) => console.log(line),
  });
  console.log(`chaos soak through failovers (shortened)\n${formatReport(report)}`);
  expect(report.violations).toEqual([]);
  expect(report.lostRuns).toBe(0);
  expect(report.failovers.length).toBeGreaterThan(0);
  // After each failover the service took submits again without a process restarted by hand.
  for (const f of report.failovers) expect(f.firstSubmitMs).toBeDefined();
  expect(report.runs).toBeGreaterThan(10);
  expect(report.succeeded).toBe(report.runs);
}, 240_000);
