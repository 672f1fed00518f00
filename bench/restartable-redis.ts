import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { freePort, redisServerProblem } from '../src/cli/local-redis.ts';

/**
 * A redis-server the chaos soak can SIGKILL and start again on the same port with the same
 * data directory, so every client (API, worker, the soak itself) reconnects to the same
 * address and finds what was written before the crash.
 *
 * Append-only with `appendfsync always`: Redis replies only after the write reached the
 * disk, so a write a client saw acknowledged survives a SIGKILL. That is the durability a
 * deployment that promises "nothing accepted is lost" must run with; the soak checks the
 * promise under exactly that setting.
 */
export interface RestartableRedis {
  url: string;
  port: number;
  /** SIGKILL: no shutdown save, no goodbye to clients, as a crash or an OOM kill. */
  kill(): Promise<void>;
  /** Starts the server again on the same port; resolves once it has loaded its data. */
  start(): Promise<void>;
  /** Stops it for good (SIGKILL; the data directory belongs to the caller). */
  stop(): Promise<void>;
  readonly running: boolean;
}

export async function startRestartableRedis(dir: string): Promise<RestartableRedis> {
  const problem = redisServerProblem();
  if (problem) throw new Error(problem);
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  let child: ChildProcess | undefined;

  const launch = async (): Promise<void> => {
    const p = spawn('redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '',
      '--appendonly', 'yes', '--appendfsync', 'always', '--protected-mode', 'yes',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    child = p;
    let log = '';
    await new Promise<void>((resolve, reject) => {
      // Loading a large append-only file takes a while on a busy machine: be patient.
      const timer = setTimeout(() => reject(new Error(`redis-server did not start on ${port}:\n${log}`)), 30_000);
      const onData = (b: Buffer) => {
        log += b;
        if (log.includes('Ready to accept connections')) {
          clearTimeout(timer);
          p.stdout?.off('data', onData);
          resolve();
        }
      };
      p.stdout?.on('data', onData);
      p.stderr?.on('data', (b) => { log += b; });
      p.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`redis-server exited (${code ?? signal}) while starting:\n${log}`));
      });
    });
    // Keep draining its output so a chatty server never blocks on a full pipe.
    p.stdout?.resume();
    p.stderr?.resume();
  };

  const kill = async (): Promise<void> => {
    const p = child;
    child = undefined;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGKILL');
    });
  };

  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    kill,
    async start() {
      if (child) return;
      await launch();
    },
    stop: kill,
    get running() {
      return child !== undefined;
    },
  };
}
