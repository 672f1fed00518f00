import { cpus } from 'node:os';
import { benchBaton, benchRawBullmq } from './e2e.ts';
import { withBenchRedis } from './redis-stats.ts';
import { benchStreams, printStreams } from './streams.ts';
import { benchTransitions } from './transitions.ts';
import { spawnWorker } from './worker-process.ts';

/**
 * `npm run bench`: every figure is measured in this run against one Redis, so ratios compare
 * like with like on whatever machine runs it. BENCH_RUNS sets the run count (default 2000).
 * Uses REDIS_URL when set, else its own redis-server (no persistence) on a free port.
 */
const n = Number(process.env.BENCH_RUNS ?? 2000);
const concurrency = 50;

async function main(redisUrl: string): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}; ${n} runs, worker concurrency ${concurrency}`);
  const raw = await benchRawBullmq(redisUrl, n, concurrency);
  const baton = await benchBaton(redisUrl, n, concurrency);
  const engine = await benchBaton(redisUrl, n, concurrency, { viaHttp: false });
  console.log('\nend to end (one process, one worker)');
  console.table({
    'raw BullMQ (add + no-op process)': fmt(raw),
    'Baton engine (RunStore.submit → echo → succeeded, no HTTP)': fmt(engine),
    'Baton (HTTP submit → echo → succeeded)': fmt(baton),
  });
  console.log(`Baton engine / raw BullMQ: throughput ${(engine.runsPerSec / raw.runsPerSec).toFixed(2)}x`);
  console.log(`Baton / raw BullMQ: throughput ${(baton.runsPerSec / raw.runsPerSec).toFixed(2)}x, Redis commands per run ${(baton.commandsPerRun / raw.commandsPerRun).toFixed(2)}x`);

  console.log('\nRedis round trips and commands per transition');
  console.table(await benchTransitions(redisUrl));

  printStreams(await benchStreams(redisUrl));

  // Scale-out: the API in this process, 1, 2 and 4 `baton worker` processes.
  const scale: Record<string, ReturnType<typeof fmt>> = { 'raw BullMQ (1 in-process worker)': fmt(raw) };
  for (const workers of [1, 2, 4]) {
    const t = await benchBaton(redisUrl, n, concurrency, { workers, spawnWorkers: spawnWorker });
    scale[`Baton, ${workers} worker process${workers > 1 ? 'es' : ''}`] = fmt(t);
  }
  console.log(`\nscale-out (${cpus().length} cores: more processes than cores only adds contention)`);
  console.table(scale);
}

function fmt(t: { runsPerSec: number; commandsPerRun: number; seconds: number }) {
  return { 'runs/s': Math.round(t.runsPerSec), 'redis cmds/run': Number(t.commandsPerRun.toFixed(1)), seconds: Number(t.seconds.toFixed(2)) };
}

await withBenchRedis(main);
