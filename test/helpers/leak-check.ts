import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { closeFileScoped, closeTestScoped, markInTest } from './resources.ts';

/**
 * Leak checks. After each test: no server or child process opened during the test is
 * still open (harness resources are closed for the test first). After each file: no
 * socket is left (Redis connections, BullMQ workers and queues), once the harness closed
 * what the file opened. Sockets are checked per file, not per test, because file-scoped
 * APIs and workers open their connections lazily while tests run.
 */
const PER_TEST = new Set(['TCPServerWrap', 'ProcessWrap']);
const PER_FILE = new Set(['TCPServerWrap', 'ProcessWrap', 'TCPSocketWrap', 'TCPWrap']);

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

beforeAll(() => {
  fileBaseline = counts(PER_FILE);
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
  // fetch keeps idle keep-alive sockets in its global pool; close the pool so they count as closed.
  const pool = (globalThis as Record<symbol, { close?(): Promise<void> } | undefined>)[Symbol.for('undici.globalDispatcher.1')];
  await pool?.close?.().catch(() => {});
  await expectNoExcess(PER_FILE, fileBaseline, 'test file');
});
