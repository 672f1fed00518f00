import { spawn } from 'node:child_process';
import { BIN } from './harness.ts';
import { track } from './resources.ts';

export interface CliResult { code: number | null; stdout: string; stderr: string }

/**
 * Runs `baton <args>` from the sources with only PATH and `env` in its environment (the client
 * commands read BATON_URL, BATON_API_KEY, BATON_SCOPE); resolves with its exit code and output.
 * A command still running when the file ends is killed.
 */
export function runBaton(args: string[], env: Record<string, string>): Promise<CliResult> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  track(child, async () => { if (child.exitCode === null) child.kill('SIGKILL'); });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b) => { stdout += b; });
  child.stderr.on('data', (b) => { stderr += b; });
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

/**
 * The timeout of a test that spawns the CLI (`baton ...`, a second of CPU at each start to load
 * its modules, ten times that in time on a 2-core machine running other suites beside this
 * one). A test spawning several ran past the 60 s default under load
 * (schedules' "create, list, get, pause, resume and delete": 11 commands); this leaves room for it.
 */
export const CLI_TEST_TIMEOUT_MS = 180_000;

/** How long one spawned CLI command may run before it is killed, for the same reason. */
export const CLI_PROCESS_TIMEOUT_MS = 120_000;
