import type { Reporter, TestModule } from 'vitest/node';

/**
 * Prints, after the run, the test files that took longest (CI's log: .ci/run sets
 * SLOWEST_FILES=10; CI=true prints 10 too), so a file that grows slow is seen before it runs
 * out its timeout on a loaded runner. A file's time is what its worker spent on it: preparing,
 * the setup files, importing it and its tests and hooks. Beside the default reporter, whose
 * output it leaves as it is.
 */
export class SlowestFiles implements Reporter {
  constructor(private readonly count: number) {}

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const files = modules.map((m) => {
      const d = m.diagnostic();
      const ms = d.prepareDuration + d.setupDuration + d.collectDuration + d.duration;
      return { file: m.relativeModuleId, ms, tests: [...m.children.allTests()].length };
    }).sort((a, b) => b.ms - a.ms);
    if (!files.length) return;
    const total = files.reduce((n, f) => n + f.ms, 0);
    const lines = files.slice(0, this.count).map((f, i) =>
      `  ${String(i + 1).padStart(2)}. ${(f.ms / 1000).toFixed(1).padStart(6)} s  ${f.file} (${f.tests} test${f.tests === 1 ? '' : 's'})`);
    console.log(`\nThe ${Math.min(this.count, files.length)} slowest of ${files.length} test files ` +
      `(time in their workers; ${(total / 1000).toFixed(0)} s over all files):\n${lines.join('\n')}`);
  }
}

/** How many slowest files to print: SLOWEST_FILES, else 10 with CI=true, else none. */
export function slowestFilesCount(env: NodeJS.ProcessEnv = process.env): number {
  if (env.SLOWEST_FILES !== undefined) return Math.max(0, Number.parseInt(env.SLOWEST_FILES, 10) || 0);
  return env.CI === 'true' ? 10 : 0;
}
