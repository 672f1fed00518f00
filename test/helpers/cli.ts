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
