import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { closeFileScoped, closeTestScoped, markInTest } from './resources.ts';

/**
 * Leak checks, and what a file changed of the process put back (the fetch pool, the
 * environment), so the next file a worker runs finds the process as the first one did.
 * After each test: no server or child process opened during the test is
 * still open (harness resources are closed for the test first). After each file: no
 * socket is left (Redis connections, BullMQ workers and queues), once the harness closed
 * what the file opened. Sockets are checked per file, not per test, because file-scoped
 * APIs and workers open their connections lazily while tests run.
 */
const PER_TEST = new Set(['TCPServerWrap', 'ProcessWrap']);
const PER_FILE = new Set(['TCPServerWrap', 'ProcessWrap', 'TCPSocketWrap', 'TCPWrap']);
/** Where Node's fetch keeps its connection pool (an undici Agent). */
const GLOBAL_DISPATCHER = Symbol.for('undici.globalDispatcher.1');

function counts(kinds: Set<string>): Map<string, number> {
  const m = new Map<string, number>();
  for (const r of process.getActiveResourcesInfo()) if (kinds.has(r)) m.set(r, (m.get(r) ?? 0) + 1);
  return m;
}

async function expectNoExcess(kinds: Set<string>, baseline: Map<string, number>, what: string): Promise<void> {
  const excess = () => {
    const out: string[] = [];
    for (const [k, n] of counts(kinds)) if (n > (baseline.get(k) ?? 0)) out.push(`${k} x${n - (baseline.get(k) ?? 0)}`);
    return out;
  };
  // Sockets and processes close a moment after their close() resolves: allow 2 s.
  const until = Date.now() + 2000;
  while (excess().length && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
  const left = excess();
  if (left.length) throw new Error(`${what} leaked open handles: ${left.join(', ')}`);
}

let fileBaseline = new Map<string, number>();
let testBaseline = new Map<string, number>();
/** The environment as the file found it: what a file sets in process.env ends with the file. */
let fileEnv: NodeJS.ProcessEnv = {};

beforeAll(() => {
  fileBaseline = counts(PER_FILE);
  fileEnv = { ...process.env };
});

beforeEach(() => {
  testBaseline = counts(PER_TEST);
  markInTest(true);
});

afterEach(async () => {
  markInTest(false);
  await closeTestScoped();
  await expectNoExcess(PER_TEST, testBaseline, 'test');
});

afterAll(async () => {
  await closeFileScoped();
  // fetch keeps idle keep-alive sockets in its global pool; close the pool so they count as
  // closed, and put a new one of the same kind in its place for the next file of this worker.
  const slot = globalThis as unknown as Record<symbol, { close?(): Promise<void> } | undefined>;
  const pool = slot[GLOBAL_DISPATCHER];
  if (pool) {
    await pool.close?.().catch(() => {});
    slot[GLOBAL_DISPATCHER] = new (pool.constructor as new () => typeof pool)();
  }
  await expectNoExcess(PER_FILE, fileBaseline, 'test file');
  for (const name of Object.keys(process.env)) if (!(name in fileEnv)) delete process.env[name];
  Object.assign(process.env, fileEnv);
});
