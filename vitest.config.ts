import { defineConfig } from 'vitest/config';
import { SlowestFiles, slowestFilesCount } from './test/helpers/slowest-files.ts';

const slowest = slowestFilesCount();

/**
 * The long drills: soaks, failovers, memory under hundreds of stalled readers, the CLI's
 * whole-process runs (npm installs, a supervised redis-server killed and restarted, reloads on
 * save), and the rolling upgrade from the last release (which installs that release's
 * dependencies). Each takes half a minute to a few of a worker; together they were a quarter
 * of the suite's time in CI (531 of 2,315 s). `npm test` runs the others (project `quick`);
 * `npm run test:long` runs these (project `long`), and CI runs both. `npx vitest run test/<file>.test.ts` runs any one.
 */
export const LONG_FILES = [
  'test/soak.test.ts', 'test/upgrade-soak.test.ts', 'test/sentinel.test.ts',
  'test/init.test.ts', 'test/start-collisions.test.ts', 'test/start-supervision.test.ts', 'test/start-watch.test.ts',
  'test/stream-limits.test.ts', 'test/stream-stalled-memory.test.ts', 'test/bytes-limits.test.ts',
  'test/upgrade.test.ts', 'test/cluster-failover.test.ts',
];

export default defineConfig({
  test: {
    projects: [
      // A worker loads Baton's modules once for all the quick files it runs rather than once a
      // file (the imports were 120 of 1,340 s of the files' time, and the run 343 s against 238 s
      // with them shared). What isolates a file is kept: its own key prefix, runtime, processes
      // and Redis keys; the leak check closes what it opened and puts back the fetch pool and the
      // environment it changed (helpers/leak-check.ts). The long drills keep a process each.
      { extends: true, test: { name: 'quick', include: ['test/**/*.test.ts'], exclude: LONG_FILES, isolate: false } },
      { extends: true, test: { name: 'long', include: LONG_FILES } },
    ],
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/leak-check.ts'],
    pool: 'forks',
    // Most files wait on processes, leases and sockets rather than on the CPU: four at once on
    // two cores halved the suite's wall time (542 s with two, 296 s with four). With modules
    // shared (isolate: false) the cores are about 90 % busy at four, and five gained nothing:
    // clean-clone CI ran `npm test` in 253 s with five against 249 s with four.
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Fault tests kill and restart processes; a flake there is a bug to fix, not to retry.
    retry: 0,
    // CI's log names the slowest files after the usual output (SLOWEST_FILES=N, or CI=true: 10).
    reporters: slowest ? ['default', new SlowestFiles(slowest)] : ['default'],
  },
});
