import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The `baton` command from src/ (test/helpers/baton-src.mjs): the soak checks the code as it is, no build needed.
const BIN = fileURLToPath(new URL('../test/helpers/baton-src.mjs', import.meta.url));

export type Kind = 'api' | 'worker';

export interface Member {
  kind: Kind;
  name: string;
  process: ChildProcess;
  /** For an API: where it listens. */
  url?: string;
  logFile: string;
  /** Set when the soak killed it on purpose. */
  killed: boolean;
  exited: Promise<void>;
}

/** A process that exited without being killed: a crash the soak reports. */
export interface Crash { name: string; code: number | null; signal: string | null; logFile: string }

/**
 * The soak's API and worker processes, started as `baton api|worker` processes the way an
 * operator runs them, each logging to its own file in `logDir`. It plays the supervisor
 * (systemd, Kubernetes): a killed process is replaced by a new one. A process that dies on
 * its own is recorded as a crash.
 */
export class Fleet {
  readonly members = new Set<Member>();
  readonly crashes: Crash[] = [];
  private seq = 0;
  private stopping = false;

  constructor(private readonly o: { env: Record<string, string>; agents: string[]; logDir: string }) {}

  get apis(): Member[] {
    return [...this.members].filter((m) => m.kind === 'api' && m.url);
  }

  get workers(): Member[] {
    return [...this.members].filter((m) => m.kind === 'worker');
  }

  /**
   * Starts a process and waits for its ready line. A start can fail while Redis is being
   * restarted (it gives up after a few seconds without Redis): try again, as a supervisor would.
   */
  async start(kind: Kind): Promise<Member> {
    for (let tries = 1; ; tries++) {
      try {
        return await this.startOnce(kind);
      } catch (err) {
        if (this.stopping || tries >= 10) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  private async startOnce(kind: Kind): Promise<Member> {
    const name = `${kind}-${++this.seq}`;
    const logFile = join(this.o.logDir, `${name}.log`);
    const log = createWriteStream(logFile);
    const args = [BIN, kind, ...(kind === 'worker' ? this.o.agents.flatMap((a) => ['--agents', a]) : [])];
    const child = spawn(process.execPath, args, { env: { ...process.env, ...this.o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    const exited = new Promise<void>((resolve) => child.once('exit', () => { closeLog(log); resolve(); }));
    const member: Member = { kind, name, process: child, logFile, killed: false, exited };
    const ready = kind === 'api' ? /listening on (http:\/\/\S+)/ : /serving runtime/;
    let out = '';
    await new Promise<void>((resolve, reject) => {
      // tsx compiles the sources at start: on a loaded 2-core machine that takes seconds.
      const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${name} did not start in 60 s`)); }, 60_000);
      child.stdout!.on('data', (b) => {
        if (out.length < 4096) out += b;
        const m = ready.exec(out);
        if (m) {
          clearTimeout(timer);
          member.url = m[1];
          resolve();
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${name} exited (${code ?? signal}) while starting; see ${logFile}`));
      });
    });
    this.members.add(member);
    child.once('exit', (code, signal) => {
      this.members.delete(member);
      if (!member.killed && !this.stopping) {
        this.crashes.push({ name, code, signal, logFile });
      }
    });
    return member;
  }

  /** SIGKILL: no shutdown hook runs, leases and SSE streams are simply cut. */
  async kill(member: Member): Promise<void> {
    member.killed = true;
    this.members.delete(member);
    if (member.process.exitCode === null && member.process.signalCode === null) member.process.kill('SIGKILL');
    await member.exited;
  }

  async stopAll(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.members].map((m) => this.kill(m)));
  }
}

function closeLog(log: WriteStream): void {
  // Let the pipes drain what the child wrote last before closing the file.
  setImmediate(() => log.end());
}

/** The last lines a process wrote (for a crash report). */
export function logTail(file: string, lines = 15): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}
