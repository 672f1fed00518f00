import { defineConfig } from 'vitest/config';
import { SlowestFiles, slowestFilesCount } from './test/helpers/slowest-files.ts';

const slowest = slowestFilesCount();

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/leak-check.ts'],
    pool: 'forks',
    // Most files wait on processes, leases and sockets rather than on the CPU: four at once on
    // two cores halves the suite's wall time (measured: 542 s with two, 296 s with four).
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Fault tests kill and restart processes; a flake there is a bug to fix, not to retry.
    retry: 0,
    // CI's log names the slowest files after the usual output (SLOWEST_FILES=N, or CI=true: 10).
    reporters: slowest ? ['default', new SlowestFiles(slowest)] : ['default'],
  },
});
