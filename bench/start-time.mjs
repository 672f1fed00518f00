#!/usr/bin/env node
// Start time of `baton start` and `baton worker`: from spawn to the line that says the process
// serves, median of N runs, against one redis-server of its own (so `baton start` spawns none).
//   node bench/start-time.mjs [--bin bin/baton.js] [--runs 5]
// --bin takes any `baton` entry, e.g. another checkout's bin/baton.js, to compare two builds.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { bin: { type: 'string' }, runs: { type: 'string', default: '5' } } });
const bin = resolve(values.bin ?? fileURLToPath(new URL('../bin/baton.js', import.meta.url)));
const runs = Number(values.runs);

const port = await new Promise((res) => {
  const srv = createServer().listen(0, '127.0.0.1', () => {
    const { port: free } = srv.address();
    srv.close(() => res(free));
  });
});
const dir = mkdtempSync(join(tmpdir(), 'baton-start-time-'));
const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
await new Promise((r) => setTimeout(r, 300));

/** Milliseconds from spawn to a line matching `ready`; the process is then stopped. */
function time(command, ready) {
  const env = { ...process.env, REDIS_URL: `redis://127.0.0.1:${port}`, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'warn', BATON_KEY_PREFIX: `st${process.pid}` };
  const t0 = process.hrtime.bigint();
  const child = spawn(process.execPath, [bin, command], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((res, rej) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); rej(new Error(`${command} did not start:\n${out}`)); }, 120_000);
    const look = (b) => {
      out += b;
      if (!ready.test(out)) return;
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      clearTimeout(timer);
      child.once('exit', () => res(ms));
      child.kill('SIGTERM');
    };
    child.stdout.on('data', look);
    child.stderr.on('data', (b) => { out += b; });
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
try {
  console.log(`${bin} (node ${process.version}), ${runs} runs each`);
  for (const [command, ready] of [['start', /baton is up/], ['worker', /serving runtime/]]) {
    const ms = [];
    for (let i = 0; i < runs; i++) ms.push(await time(command, ready));
    console.log(`baton ${command}: median ${Math.round(median(ms))} ms  (${ms.map((m) => Math.round(m)).join(', ')})`);
  }
} finally {
  redis.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
