import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

export interface LocalRedis { url: string; port: number; process: ChildProcess; stop(): Promise<void> }

const INSTALL = 'Debian/Ubuntu: apt-get install -y redis-server (Debian 12 and Ubuntu 24.04 ship 7.x); macOS: brew install redis';

/**
 * Why the redis-server on PATH cannot serve Baton, or undefined when it can: it is missing,
 * or older than 7.0 (the transitions are a Redis Function library).
 */
export function redisServerProblem(): string | undefined {
  const r = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return `redis-server was not found on PATH. Install it (${INSTALL}) or set REDIS_URL.`;
  const version = /v=(\d+)\.(\d+)\.(\d+)/.exec(r.stdout);
  if (!version) return `redis-server --version printed no version Baton can read: ${r.stdout.trim()}`;
  if (Number(version[1]) < 7) {
    return `redis-server ${version.slice(1).join('.')} is on PATH; Baton needs Redis 7.0 or later (its transitions are a Redis Function library). Install a newer one (${INSTALL}) or set REDIS_URL.`;
  }
  return undefined;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => res(port));
    });
  });
}

/**
 * Starts redis-server on a free loopback port with its data under `dir` and append-only
 * persistence on, so a restarted `baton start` finds every accepted run again.
 */
export async function startLocalRedis(dir: string, extraArgs: string[] = []): Promise<LocalRedis> {
  const problem = redisServerProblem();
  if (problem) throw new Error(problem);
  const abs = resolve(dir);
  mkdirSync(abs, { recursive: true });
  const port = await freePort();
  const child = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', abs, '--appendonly', 'yes',
    '--save', '', '--protected-mode', 'yes', ...extraArgs,
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout?.on('data', (b) => { log += b; });
  child.stderr?.on('data', (b) => { log += b; });
  await new Promise<void>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`redis-server did not start:\n${log}`)), 10_000);
    const check = () => {
      if (log.includes('Ready to accept connections')) { clearTimeout(timer); res(); }
    };
    child.stdout?.on('data', check);
    child.once('exit', (code) => { clearTimeout(timer); rej(new Error(`redis-server exited (${code}):\n${log}`)); });
  });
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    process: child,
    stop: () => new Promise((res) => {
      if (child.exitCode !== null) return res();
      child.once('exit', () => res());
      child.kill('SIGTERM');
    }),
  };
}
