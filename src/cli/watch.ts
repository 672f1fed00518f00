import { spawn, type ChildProcess } from 'node:child_process';
import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import type { Logger } from '../lib/logger.ts';
import type { ReadinessCheck } from '../lib/ops/health.ts';

/**
 * `baton start --watch`: the worker half runs in a child process (`baton worker`), one
 * generation at a time, so a saved agent module is loaded by a new process (Node cannot unload
 * a module, nor the local modules it imported). On a save the next generation starts with the
 * new code; once it serves, the previous one drains through its graceful shutdown: it claims
 * nothing more, its in-flight runs finish within SHUTDOWN_GRACE_MS or are handed over. The API,
 * the redis-server and the sweeper of `baton start` stay up throughout. A generation that fails
 * to load leaves the serving one as it is, and the next save tries again.
 */

/** Saves closer together than this are one change: an editor writes, renames and chmods in a burst. */
const DEBOUNCE_MS = 150;
/** A new generation that is neither serving nor failed by then is stuck (a top-level await that hangs). */
const READY_TIMEOUT_MS = 120_000;
/** A generation that died on its own is replaced after this pause, so a crash loop is a line a second, not a spin. */
const RESPAWN_DELAY_MS = 1_000;

/** The child's environment variable that carries its generation; set, the child talks to its parent over IPC. */
const GENERATION_ENV = 'BATON_WATCH_GENERATION';

/** What a worker of `baton start --watch` tells its parent, over the IPC channel. */
export type GenerationMessage =
  /** Serving: its BullMQ workers run. `modules`: the local files its agent modules loaded. */
  | { kind: 'ready'; workerId: string; agents: string[]; modules: string[] }
  /** Its agent modules did not load; it exits 1 after this. */
  | { kind: 'failed'; error: string; modules: string[] }
  /** It got SIGTERM and claims nothing more (what it holds finishes or is handed over). */
  | { kind: 'draining' };

/** A worker's side of the channel: set when `baton start --watch` spawned this process. */
export interface GenerationChannel {
  generation: number;
  send(m: GenerationMessage): Promise<void>;
}

export function generationChannel(env: Record<string, string | undefined>): GenerationChannel | undefined {
  const generation = Number(env[GENERATION_ENV]);
  const send = process.send?.bind(process);
  if (!send || !Number.isInteger(generation) || generation < 1) return undefined;
  // A parent that is gone (killed) leaves nobody to stop this worker: it drains as on SIGTERM.
  process.once('disconnect', () => process.kill(process.pid, 'SIGTERM'));
  return {
    generation,
    send: (m) => new Promise<void>((done) => { send(m, undefined, {}, () => done()); }),
  };
}

export interface WatchOptions {
  agentPaths: readonly string[];
  /** The workers' environment (REDIS_URL set, the flags of `baton start` applied). */
  env: Record<string, string | undefined>;
  log: Logger;
  /** Whether the worker registry has this worker live (the readiness check). */
  registered(workerId: string): Promise<boolean>;
}

export interface WatchedWorkers {
  /** The agents the first generation serves. */
  agents: readonly string[];
  /** `worker`: a generation serves and is registered. */
  checks: readonly ReadinessCheck[];
  /** Stops watching, then every generation drains; resolves once all exited. Idempotent. */
  close(): Promise<void>;
}

interface Generation {
  n: number;
  child: ChildProcess;
  workerId: string;
  agents: string[];
  modules: string[];
  /** Resolves when it said it drains, or exited. */
  draining: Promise<void>;
}

type Spawned = { ok: true; generation: Generation } | { ok: false; error: string; modules: string[] };

/**
 * Starts the first generation (its load error fails the start, as without --watch) and
 * watches the files it loaded; each save replaces the serving generation, one reload at a time.
 */
export async function startWatchedWorkers(o: WatchOptions): Promise<WatchedWorkers> {
  const children = new Map<ChildProcess, Promise<void>>();
  // Each worker gets one SIGTERM: a second one, a second apart, would make it exit at once
  // (shutdown.ts) and drop the runs it is finishing.
  const stopped = new WeakSet<ChildProcess>();
  const stop = (child: ChildProcess) => {
    if (stopped.has(child)) return;
    stopped.add(child);
    child.kill('SIGTERM');
  };
  let count = 0;
  let current: Generation | undefined;
  let closing: Promise<void> | undefined;
  const pending = new Set<string>();
  let queue = Promise.resolve();
  const files = new FileWatcher(o.log, (changed) => {
    for (const f of changed) pending.add(f);
    enqueue();
  });

  const spawnNext = (): Promise<Spawned> => {
    const s = spawnGeneration(++count, o);
    children.set(s.child, s.exited.then(() => { children.delete(s.child); }));
    return s.result;
  };

  /** Replaces the serving generation; `changed` empty: the serving one died. */
  const replace = async (changed: string[]) => {
    const shown = changed.map(shownPath);
    const next = await spawnNext();
    if (closing) return;
    if (!next.ok) {
      o.log.error({ generation: count, changed: shown, error: next.error }, current
        ? 'agent modules failed to load; the running worker keeps serving'
        : 'agent modules failed to load; no worker serves until the next save');
      // A file the failed load named (a new import with the error in it) is watched too.
      files.watch([...files.files, ...next.modules]);
      return;
    }
    const previous = current;
    current = next.generation;
    follow(next.generation);
    if (previous) {
      stop(previous.child);
      await previous.draining;
    }
    files.watch(next.generation.modules);
    o.log.info({
      generation: next.generation.n, workerPid: next.generation.child.pid, previousWorkerPid: previous?.child.pid,
      changed: shown, agents: next.generation.agents,
    }, changed.length ? 'agent modules reloaded' : 'worker started again');
  };

  /** One replacement at a time: the saves made meanwhile are the next one's. `respawn`: after a worker died. */
  function enqueue(respawn = false) {
    queue = queue.then(async () => {
      if (closing) return;
      // A reload under way when the worker died has replaced it already.
      if (respawn) return current ? undefined : replace([]);
      if (pending.size === 0) return;
      const saved = [...pending];
      pending.clear();
      return replace(saved);
    }).catch((err: unknown) => {
      o.log.error({ err: (err as Error).message }, 'agent reload failed; the next save tries again');
    });
  }

  /** A serving generation that exits on its own (not drained by a reload) is replaced. */
  function follow(g: Generation) {
    g.child.once('exit', (code, signal) => {
      if (current !== g || closing) return;
      current = undefined;
      o.log.error({ generation: g.n, workerPid: g.child.pid, code, signal }, 'worker exited; starting another');
      setTimeout(() => enqueue(true), RESPAWN_DELAY_MS).unref();
    });
  }

  const first = await spawnNext();
  if (!first.ok) throw new Error(first.error);
  current = first.generation;
  follow(current);
  files.watch(current.modules);
  o.log.info({ generation: current.n, workerPid: current.child.pid, files: files.files.map(shownPath) }, 'watching agent modules: a save reloads them');

  return {
    agents: current.agents,
    checks: [{
      name: 'worker',
      async run() {
        if (closing) return { ok: false, status: 'stopping' };
        const ok = current !== undefined && await o.registered(current.workerId).catch(() => false);
        return { ok, status: ok ? 'registered' : 'missing' };
      },
    }],
    close() {
      closing ??= (async () => {
        files.close();
        for (const child of children.keys()) stop(child);
        await Promise.all(children.values());
      })();
      return closing;
    },
  };
}

/** A file as the log shows it: relative to the folder Baton started in, when it is inside it. */
function shownPath(file: string): string {
  const r = relative(process.cwd(), file);
  return r && !r.startsWith('..') ? r : file;
}

/** Node's own flags for the child, without a debugger's: its port is the parent's. */
const nodeFlags = () => process.execArgv.filter((f) => !/^--inspect/.test(f));

/** `baton worker` with the same agents, through the same entry point as this process. */
function spawnGeneration(n: number, o: WatchOptions): { child: ChildProcess; exited: Promise<void>; result: Promise<Spawned> } {
  const args = [...nodeFlags(), process.argv[1], 'worker', ...o.agentPaths.flatMap((p) => ['--agents', p])];
  const child = spawn(process.execPath, args, {
    // METRICS_PORT 0: two generations overlap while one drains, each with its own /metrics.
    env: { ...o.env, METRICS_PORT: '0', [GENERATION_ENV]: String(n) },
    // A group of its own: a terminal's Ctrl-C reaches `baton start`, which drains it in order.
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    detached: true,
  });
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  let drains: () => void = () => {};
  const draining = new Promise<void>((done) => { drains = done; });
  void exited.then(() => drains());
  const result = new Promise<Spawned>((settle) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      settle({ ok: false, error: `the worker was not serving within ${READY_TIMEOUT_MS} ms`, modules: [] });
    }, READY_TIMEOUT_MS);
    const done = (s: Spawned) => { clearTimeout(timer); settle(s); };
    child.on('message', (m: GenerationMessage) => {
      if (m.kind === 'ready') done({ ok: true, generation: { n, child, workerId: m.workerId, agents: m.agents, modules: m.modules, draining } });
      else if (m.kind === 'failed') done({ ok: false, error: m.error, modules: m.modules });
      else drains();
    });
    child.once('error', (err) => done({ ok: false, error: err.message, modules: [] }));
    child.once('exit', (code, signal) => done({ ok: false, error: `the worker exited (${code ?? signal}) before it served`, modules: [] }));
  });
  return { child, exited, result };
}

/**
 * Watches files through their folders (fs.watch, one per folder, not recursive): an editor that
 * saves by writing a new file and renaming it over the old one would leave a watch on the old
 * file's inode deaf. Changes are reported once a burst of them is over.
 */
class FileWatcher {
  private readonly folders = new Map<string, { watcher: FSWatcher; names: Set<string> }>();
  private readonly changed = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  files: readonly string[] = [];

  constructor(private readonly log: Logger, private readonly onChange: (files: string[]) => void) {}

  /** Watches exactly these files from now on. */
  watch(files: readonly string[]): void {
    if (this.closed) return;
    this.files = [...new Set(files)];
    const wanted = new Map<string, Set<string>>();
    for (const f of this.files) {
      const names = wanted.get(dirname(f)) ?? new Set<string>();
      wanted.set(dirname(f), names.add(basename(f)));
    }
    for (const [dir, entry] of this.folders) {
      if (wanted.has(dir)) continue;
      entry.watcher.close();
      this.folders.delete(dir);
    }
    for (const [dir, names] of wanted) {
      const entry = this.folders.get(dir);
      if (entry) {
        entry.names = names;
        continue;
      }
      try {
        const watcher = watch(dir, (_event, name) => this.saw(dir, name));
        watcher.on('error', (err) => this.log.warn({ dir, err: err.message }, 'cannot watch a folder of agent modules'));
        this.folders.set(dir, { watcher, names });
      } catch (err) {
        this.log.warn({ dir, err: (err as Error).message }, 'cannot watch a folder of agent modules');
      }
    }
  }

  private saw(dir: string, name: string | Buffer | null): void {
    const entry = this.folders.get(dir);
    if (!entry || name === null || !entry.names.has(String(name))) return;
    this.changed.add(join(dir, String(name)));
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      const files = [...this.changed];
      this.changed.clear();
      this.onChange(files);
    }, DEBOUNCE_MS);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    for (const { watcher } of this.folders.values()) watcher.close();
    this.folders.clear();
  }
}
