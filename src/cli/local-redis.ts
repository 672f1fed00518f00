import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, linkSync, mkdirSync, openSync, readFileSync, readlinkSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

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

export interface LocalRedisOptions {
  /**
   * Run it in a process group (and session) of its own, so a terminal's Ctrl-C, which
   * signals the whole foreground group, does not reach it: its owner stops it after
   * draining. Then it is also sent SIGTERM when this process exits without stopping it.
   */
  ownProcessGroup?: boolean;
  /** The port to listen on (a restart keeps its predecessor's, which every connection reconnects to); default a free one. */
  port?: number;
}

/**
 * Starts redis-server on a free loopback port with its data under `dir` and append-only
 * persistence on, so a restarted `baton start` finds every accepted run again.
 */
export async function startLocalRedis(dir: string, extraArgs: string[] = [], o: LocalRedisOptions = {}): Promise<LocalRedis> {
  const problem = redisServerProblem();
  if (problem) throw new Error(problem);
  const abs = resolve(dir);
  mkdirSync(abs, { recursive: true });
  const port = o.port ?? await freePort();
  const child = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', abs, '--appendonly', 'yes',
    '--save', '', '--protected-mode', 'yes', ...extraArgs,
  ], { stdio: ['ignore', 'pipe', 'pipe'], detached: o.ownProcessGroup === true });
  if (o.ownProcessGroup) {
    // Outside the group, nothing else stops it: a process.exit() on any path (a failed start,
    // a second Ctrl-C, the shutdown deadline) still does. Redis saves its append-only file on SIGTERM.
    const onExit = () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); };
    process.once('exit', onExit);
    child.once('exit', () => process.removeListener('exit', onExit));
  }
  let log = '';
  child.stdout?.on('data', (b) => { log += b; });
  child.stderr?.on('data', (b) => { log += b; });
  const stop = () => new Promise<void>((res) => {
    if (child.exitCode !== null || child.signalCode !== null) return res();
    child.once('exit', () => res());
    child.kill('SIGTERM');
  });
  try {
    await new Promise<void>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`redis-server did not start:\n${log}`)), 10_000);
      const check = () => {
        if (log.includes('Ready to accept connections')) { clearTimeout(timer); res(); }
      };
      child.stdout?.on('data', check);
      child.once('exit', (code) => { clearTimeout(timer); rej(new Error(`redis-server exited (${code}):\n${log}`)); });
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return { url: `redis://127.0.0.1:${port}`, port, process: child, stop };
}

/**
 * The lock on a `.baton/` folder: one `baton start` at a time uses the redis-server data in
 * it and the URL it notes there. The lock file holds the owner's pid and, once known, its
 * Redis and API URLs, so a second start can say where the running one is.
 */
export interface LockHolder {
  pid: number;
  startedAt: string;
  redis?: string;
  /** The pid of the redis-server the owner spawned: stopped by the next start should the owner die without stopping it. */
  redisPid?: number;
  api?: string;
}

export interface BatonDirLock {
  /** The lock file. */
  file: string;
  /** Adds the owner's Redis or API to the lock file. */
  note(fields: Pick<LockHolder, 'redis' | 'redisPid' | 'api'>): void;
  /** Removes the lock file (idempotent). */
  release(): void;
}

/**
 * A `<lock>.break` this old was left by a start that died while breaking a stale lock (the
 * breaking takes at most the 10 s given a dead start's redis-server to stop, and a moment).
 */
const ABANDONED_BREAK_MS = 30_000;

/**
 * Takes the lock on `dir` (made if missing), or returns who holds it. A lock whose owner is
 * gone (the pid no longer runs, or now runs something else) is stale and taken over, after
 * stopping a redis-server the dead owner left behind on `redisDir`.
 */
export async function lockBatonDir(dir: string, redisDir: string): Promise<BatonDirLock | { heldBy: LockHolder }> {
  const abs = resolve(dir);
  mkdirSync(abs, { recursive: true });
  const file = join(abs, 'lock');
  const mine: LockHolder = { pid: process.pid, startedAt: new Date().toISOString() };
  for (let attempt = 0; attempt < 100; attempt++) {
    if (createExclusive(file, JSON.stringify(mine))) return heldLock(file, mine);
    const text = readOrUndefined(file);
    if (text === undefined) continue;  // released just now
    const holder = parseHolder(text);
    if (holder && isOwner(holder.pid, dirname(abs))) return { heldBy: holder };
    // First the redis-server a dead owner left, then the lock: no start spawns another on its files meanwhile.
    const stopLeftover = async () => {
      if (holder?.redisPid && holder.redis) await stopOrphanedRedis(holder.redisPid, holder.redis, resolve(redisDir));
    };
    if (!(await breakStaleLock(file, text, stopLeftover))) await sleep(50);
  }
  throw new Error(`could not take the lock ${file}`);
}

/** Writes `text` to `file` only if no such file exists; the file appears whole or not at all. */
function createExclusive(file: string, text: string): boolean {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  try {
    linkSync(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    rmSync(tmp, { force: true });
  }
}

function heldLock(file: string, mine: LockHolder): BatonDirLock {
  let released = false;
  return {
    file,
    note(fields) {
      if (released) return;
      Object.assign(mine, fields);
      // Replaced whole (rename is atomic): a reader never sees half of it.
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, JSON.stringify(mine));
      renameSync(tmp, file);
    },
    release() {
      if (released) return;
      released = true;
      // Only this process's own lock: a file naming another pid is not removed.
      if (parseHolder(readOrUndefined(file) ?? '')?.pid === process.pid) rmSync(file, { force: true });
    },
  };
}

/**
 * Removes a stale lock, after `before`, unless another start is doing the same: the one that
 * makes `<lock>.break` first removes it, and only if it still reads `staleText` (the other may
 * have broken it and taken the lock meanwhile). True when this process removed it.
 */
async function breakStaleLock(file: string, staleText: string, before: () => Promise<void>): Promise<boolean> {
  const breaker = `${file}.break`;
  try {
    closeSync(openSync(breaker, 'wx'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const st = statSync(breaker, { throwIfNoEntry: false });
    if (st && Date.now() - st.mtimeMs > ABANDONED_BREAK_MS) rmSync(breaker, { force: true });
    return false;
  }
  try {
    if (readOrUndefined(file) !== staleText) return false;
    await before();
    rmSync(file, { force: true });
    return true;
  } finally {
    rmSync(breaker, { force: true });
  }
}

function readOrUndefined(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** The holder a lock file names, or undefined when it is not one (then the lock is stale). */
function parseHolder(text: string): LockHolder | undefined {
  try {
    const v = JSON.parse(text) as LockHolder;
    return Number.isSafeInteger(v?.pid) && v.pid > 0 ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `pid` is a running `baton` in `folder`. A pid outlives its process: after a crash
 * or a reboot it may name another program, so the command (and, where /proc tells, the working
 * folder) must match too. This process is never the owner of a lock it has yet to take (in a
 * container, a restarted start often gets the same pid).
 */
function isOwner(pid: number, folder: string): boolean {
  if (pid === process.pid || !isAlive(pid)) return false;
  const command = processCommand(pid);
  if (command !== undefined && !/baton/.test(command)) return false;
  const cwd = processCwd(pid);
  return cwd === undefined || cwd === realpathOrSelf(folder);
}

function realpathOrSelf(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The command line of `pid` (/proc on Linux, `ps` elsewhere); undefined when neither tells. */
function processCommand(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch { /* no /proc */ }
  const r = spawnSync('ps', ['-o', 'command=', '-p', String(pid)], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

/** The working folder of `pid` where /proc tells it (Linux), else undefined. */
function processCwd(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return undefined;
  }
}

/**
 * Stops the redis-server a dead start left running on `redisDir` (a start killed with
 * SIGKILL cannot stop it): a second redis-server must never share its append-only files.
 * A pid that now runs anything else, another redis-server too, is left alone: redis-server
 * shows its address in its command line, and works in its --dir.
 */
async function stopOrphanedRedis(pid: number, url: string, redisDir: string): Promise<void> {
  const port = /:(\d+)$/.exec(url)?.[1];
  if (!port) return;
  // A zombie has an empty command line: it counts as gone.
  const running = () => isAlive(pid) && new RegExp(`redis-server \\S*:${port}\\b`).test(processCommand(pid) ?? '');
  if (!running()) return;
  const cwd = processCwd(pid);  // redis-server works in its --dir
  if (cwd !== undefined && cwd !== realpathOrSelf(redisDir)) return;
  const signal = (s: NodeJS.Signals) => { try { process.kill(pid, s); } catch { /* gone meanwhile */ } };
  signal('SIGTERM');
  for (let waited = 0; running(); waited += 50) {
    if (waited === 10_000) signal('SIGKILL');
    await sleep(50);
  }
}
