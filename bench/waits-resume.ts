import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { startApi } from '../src/api/server.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { createKeys } from '../src/lib/keys.ts';
import { runtimeCounts } from '../src/lib/tenancy/runtime-counts.ts';
import { createLogger } from '../src/lib/logger.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { startWorker } from '../src/worker/worker.ts';
import { percentile, withBenchRedis } from './redis-stats.ts';
import { benchWait, closeBenchWaitRedis, continuedKey } from './waits-agent.ts';

/**
 * Resume latency: from the moment a client sends `POST …/runs/{runId}/waits/{waitKey}` to
 * the moment the agent's waitFor returns the value in a worker. In between: the API checks
 * the wait and runs the resume transition, the run is admitted for a scope slot and handed
 * to BullMQ, a worker takes the job, claims the run and runs the agent again from the top,
 * its memo answering up to the wait. 200 runs wait; they are resumed one at a time, so each
 * figure is one resume's path, not a queue. Default settings (no test shortcuts).
 *
 *   node --import tsx bench/waits-resume.ts      (BENCH_RESUMES sets the count)
 *
 * Printed, not asserted: the machine is shared and the numbers are what they are.
 */
const N = Number(process.env.BENCH_RESUMES ?? 200);
const AGENT = fileURLToPath(new URL('./waits-agent.ts', import.meta.url));
const BIN = fileURLToPath(new URL('../test/helpers/baton-src.mjs', import.meta.url));

async function measure(redisUrl: string, workerWhere: 'in-process' | 'child process'): Promise<number[]> {
  const prefix = `benchw${randomBytes(4).toString('hex')}`;
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'warn',
    SUBMIT_RATE_PER_SEC: '0',
  };
  const config = loadConfig(env);
  const log = createLogger('warn');
  const admin = new Redis(redisUrl);
  const key = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
  const api = await startApi({ config, redisUrl, log });
  let stopWorker: () => Promise<void>;
  if (workerWhere === 'in-process') {
    process.env.REDIS_URL = redisUrl;
    process.env.BATON_KEY_PREFIX = prefix;
    const w = await startWorker({ config, redisUrl, log, agents: new Map([...builtinAgents(config), benchWait].map((a) => [a.name, a])) });
    stopWorker = () => w.close();
  } else {
    stopWorker = await spawnWorker({ ...env });
  }
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const base = `${api.url}/v1/scopes/bench/runs`;
  const ids: string[] = [];
  for (let i = 0; i < N; i++) {
    const res = await fetch(base, { method: 'POST', headers, body: JSON.stringify({ sessionId: `s${i}`, input: { content: 'wait' }, agent: 'bench-wait', runtime: 'bench' }) });
    ids.push(((await res.json()) as { id: string }).id);
  }
  const stats = createKeys(prefix).scope('bench').stats('bench');
  while (runtimeCounts(await admin.hgetall(stats)).waiting < N) await new Promise((r) => setTimeout(r, 20));

  const latencies: number[] = [];
  for (const id of ids) {
    const t0 = performance.timeOrigin + performance.now();
    const res = await fetch(`${base}/${id}/waits/wait:go:1`, { method: 'POST', headers, body: JSON.stringify({ value: 'go' }) });
    if (res.status !== 200) throw new Error(`resume of ${id} answered ${res.status}: ${await res.text()}`);
    let at: string | null;
    while ((at = await admin.get(continuedKey(prefix, id))) === null) await new Promise((r) => setImmediate(r));
    latencies.push(Number(at) - t0);
  }
  while (runtimeCounts(await admin.hgetall(stats)).succeeded < N) await new Promise((r) => setTimeout(r, 20));
  await stopWorker();
  await api.close();
  await admin.quit();
  await closeBenchWaitRedis();
  return latencies;
}

async function spawnWorker(env: Record<string, string>): Promise<() => Promise<void>> {
  const child = spawn(process.execPath, [BIN, 'worker', '--agents', AGENT], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stderr.on('data', (b) => { out += b; });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (b) => {
      out += b;
      if (out.includes('serving runtime')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker exited ${code}: ${out}`)));
  });
  return () => new Promise<void>((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

function row(latencies: number[]) {
  const sorted = [...latencies].sort((a, b) => a - b);
  const ms = (v: number) => Number(v.toFixed(1));
  return {
    resumes: sorted.length, 'p50 ms': ms(percentile(sorted, 50)), 'p90 ms': ms(percentile(sorted, 90)),
    'p99 ms': ms(percentile(sorted, 99)), 'max ms': ms(sorted.at(-1)!), 'mean ms': ms(sorted.reduce((a, b) => a + b, 0) / sorted.length),
  };
}

await withBenchRedis(async (redisUrl) => {
  const inProcess = await measure(redisUrl, 'in-process');
  const child = await measure(redisUrl, 'child process');
  console.log(`resume → agent continuing, ${N} resumes one at a time`);
  console.table({ 'API + worker in one process': row(inProcess), 'API here, baton worker child process': row(child) });
});
