import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * Two ways to run `baton`. `sources` (default): src/ through tsx (test/helpers/baton-src.mjs),
 * so benchmarks measure the code as it is with no build. `compiled`: bin/baton.js, which runs
 * dist/ as a deployment does, rebuilt first when a source is newer; for figures tsx itself
 * would distort, such as memory (its loader thread and compile cache are tens of MiB).
 */
export type Launcher = 'sources' | 'compiled';
const BIN: Record<Launcher, string> = {
  sources: fileURLToPath(new URL('../test/helpers/baton-src.mjs', import.meta.url)),
  compiled: fileURLToPath(new URL('../bin/baton.js', import.meta.url)),
};
/** tsx compiles the sources at start: on a loaded 2-core machine that takes seconds. */
const START_TIMEOUT_MS = 60_000;

export interface BenchProcess {
  pid: number;
  /** An API's URL, from its ready line. */
  url?: string;
  /** A worker's id, from its ready line (the run record's `leaseOwner`). */
  workerId?: string;
  /** SIGTERM: a graceful stop, resolved once it exited. */
  stop(): Promise<void>;
  /** SIGKILL, as a crash or an OOM kill; resolved once it exited. */
  kill(): Promise<void>;
  /**
   * Resolves with the first match of `re` in what the process printed (its first 8 KiB, stdout
   * and stderr), once it appears; rejects after `timeoutMs` or when the process exits first.
   */
  printed(re: RegExp, timeoutMs: number): Promise<RegExpExecArray>;
}

let clockTicks: number | undefined;

/**
 * CPU seconds (user + system, every thread) process `pid` has used so far, from
 * /proc/<pid>/stat (utime and stime, in clock ticks: 10 ms on most Linux systems). Linux only.
 */
export function processCpuSeconds(pid: number): number {
  if (clockTicks === undefined) {
    const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    const ticks = Number(r.stdout?.trim());
    if (r.status !== 0 || !Number.isInteger(ticks) || ticks <= 0) throw new Error(`getconf CLK_TCK failed: ${r.stderr || r.error?.message}`);
    clockTicks = ticks;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count from after it.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
  return (Number(fields[11]) + Number(fields[12])) / clockTicks;
}

/**
 * Every child a bench started: killed when the bench exits, however it exits, so a failed
 * section leaves no worker consuming the next section's jobs or a port held.
 */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/**
 * The environment of a `baton api` and a `baton worker` that stream `runs` runs at once,
 * `perScope` of them in each scope: one worker takes them all, and no scope limit, submit
 * rate or per-key stream cap holds any back (every run's reader streams on its scope's one key).
 */
export function allAtOnceEnv(redisUrl: string, prefix: string, runs: number, perScope: number): Record<string, string> {
  return {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0',
    WORKER_CONCURRENCY: String(runs), MAX_ACTIVE_PER_SCOPE: String(perScope * 2), SUBMIT_RATE_PER_SEC: '0',
    SSE_MAX_PER_KEY: String(perScope * 2), SSE_MAX_PER_SCOPE: String(perScope * 2),
  };
}

/** Starts `baton api` or `baton worker` (with `agents` modules); resolves at its ready line. */
export function spawnBaton(
  kind: 'api' | 'worker', env: Record<string, string>, agents: string[] = [], launcher: Launcher = 'sources',
): Promise<BenchProcess> {
  const args = [BIN[launcher], kind, ...agents.flatMap((a) => ['--agents', a])];
  const ready = kind === 'api' ? /listening on (http:\/\/\S+)/ : /baton worker (\S+) serving runtime/;
  return start(`baton ${kind}`, args, env, ready, (m, p) => {
    if (kind === 'api') p.url = m[1];
    else p.workerId = m[1];
  });
}

/**
 * Brings dist/ up to date before a compiled process is timed or measured (bin/baton.js
 * would otherwise build it inside the first start, some seconds of tsc).
 */
export function buildCompiled(): void {
  const r = spawnSync(process.execPath, [BIN.compiled, '--help'], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (r.status !== 0) throw new Error(`bin/baton.js could not build dist/ (exit ${r.status ?? r.signal})`);
}

/** Starts a bench script (`bench/<file>.ts` through tsx) that prints `ready` once it serves. */
export function spawnScript(file: string, args: string[], env: Record<string, string> = {}): Promise<BenchProcess> {
  const path = fileURLToPath(new URL(file, import.meta.url));
  return start(file, ['--import', 'tsx', path, ...args], env, /^ready$/m, () => {});
}

function start(
  name: string, args: string[], env: Record<string, string>, ready: RegExp,
  onReady: (m: RegExpExecArray, p: BenchProcess) => void,
): Promise<BenchProcess> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => { live.delete(child); resolve(); }));
  const signal = (sig: NodeJS.Signals) => async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    await exited;
  };
  // Keep only the start of the output (for an error message and printed()) and keep draining
  // the pipes, so a chatty process never blocks on a full one.
  let out = '';
  const keep = (b: Buffer) => { if (out.length < 8192) out += b; };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  // 'close' comes once the pipes are drained too, so nothing printed is still on its way.
  const close = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const printed = (re: RegExp, timeoutMs: number) => new Promise<RegExpExecArray>((resolve, reject) => {
    let settled = false;
    const settle = (then: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.stdout!.off('data', look);
      child.stderr!.off('data', look);
      then();
    };
    const look = () => {
      const m = re.exec(out);
      if (m) settle(() => resolve(m));
    };
    const timer = setTimeout(() => settle(() => reject(new Error(`${name} did not print ${re} in ${timeoutMs / 1000} s:\n${out}`))), timeoutMs);
    child.stdout!.on('data', look);
    child.stderr!.on('data', look);
    look();
    void close.then(() => {
      look();
      settle(() => reject(new Error(`${name} exited before printing ${re}:\n${out}`)));
    });
  });
  const p: BenchProcess = { pid: child.pid!, stop: signal('SIGTERM'), kill: signal('SIGKILL'), printed };
  return new Promise<BenchProcess>((resolve, reject) => {
    const timer = setTimeout(() => {
      void p.kill();
      reject(new Error(`${name} did not start in ${START_TIMEOUT_MS / 1000} s:\n${out}`));
    }, START_TIMEOUT_MS);
    const look = () => {
      const m = ready.exec(out);
      if (!m) return;
      clearTimeout(timer);
      child.stdout!.off('data', look);
      onReady(m, p);
      resolve(p);
    };
    child.stdout!.on('data', look);
    child.once('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code ?? sig}) while starting:\n${out}`));
    });
  });
}
