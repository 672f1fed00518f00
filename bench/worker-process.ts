import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

// The `baton` command from src/ (test/helpers/baton-src.mjs): benchmarks measure the code as it is, no build needed.
const BIN = fileURLToPath(new URL('../test/helpers/baton-src.mjs', import.meta.url));

/** Starts `baton worker` as a child process; resolves with a stop function once it serves its runtime. */
export async function spawnWorker(env: Record<string, string>): Promise<() => Promise<void>> {
  const child = spawn(process.execPath, [BIN, 'worker'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stderr.on('data', (b) => { out += b; });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (b) => {
      out += b;
      if (out.includes('serving runtime')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker exited ${code}: ${out}`)));
  });
  return () => new Promise<void>((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
