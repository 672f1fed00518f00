import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { BIN, waitFor } from './harness.ts';
import { track } from './resources.ts';

/** A `baton start` process of a test, and what it printed so far. */
export interface Start {
  child: ChildProcess;
  out(): string;
  /** Resolves with the exit code (null when a signal ended it). */
  exited: Promise<number | null>;
}

/**
 * `baton start` in `cwd` without REDIS_URL (so with a redis-server of its own under `.baton/`),
 * in a process group of its own, as a terminal's foreground job is: a test sends the group a
 * Ctrl-C. Killed when the test ends, if it is still running. `env` is laid over the defaults.
 */
export function spawnStart(cwd: string, env: Record<string, string> = {}, args: string[] = []): Start {
  const e: Record<string, string | undefined> = { ...process.env, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'warn', SHUTDOWN_GRACE_MS: '2000', ...env };
  delete e.REDIS_URL;
  const child = spawn(process.execPath, [BIN, 'start', ...args], { cwd, env: e, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout!.on('data', (b) => { out += b; });
  child.stderr!.on('data', (b) => { out += b; });
  // 'exit' can come before the pipes are drained; the output is whole once they close. Waited
  // for 5 s at most: a child of `--watch` holds them as long as it lives.
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => {
    void Promise.race([closed, new Promise((t) => setTimeout(t, 5_000))]).then(() => r(code));
  }));
  track(child, async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return { child, out: () => out, exited };
}

/** The API's URL once `baton start` says it is up; throws with its output if it exited first. */
export async function startedApi(s: Start): Promise<string> {
  await waitFor(() => /baton is up: API (\S+)/.test(s.out()) || s.child.exitCode !== null, 30_000, `baton start to come up:\n${s.out()}`);
  const m = /baton is up: API (\S+)/.exec(s.out());
  if (!m) throw new Error(`baton start exited ${s.child.exitCode}:\n${s.out()}`);
  return m[1];
}

/** The redis-servers working in `dir` (redis-server runs in its --dir), by pid: what a start left running. */
export function redisServersIn(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      if (comm === 'redis-server' && readlinkSync(`/proc/${entry}/cwd`) === dir) pids.push(Number(entry));
    } catch { /* gone meanwhile */ }
  }
  return pids;
}
