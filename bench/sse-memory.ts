import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { createKeys } from '../src/lib/keys.ts';
import { buildCompiled, spawnBaton, type Launcher } from './processes.ts';

/**
 * Memory of an API process holding SSE clients: a fresh `baton api` process, BENCH_SSE_CLIENTS
 * (default 1,000) typed clients in this process following one queued run (no worker: the
 * run waits, so the figure is the connections' cost, not a stream's), RSS read from
 * /proc/<pid>/status once every client has its first event and the process settled.
 * The API runs compiled (bin/baton.js), as deployed; the same API run from the sources
 * through tsx is measured too, since that is how the figure was first taken (issue 18).
 */
export const SSE_CLIENTS = Number(process.env.BENCH_SSE_CLIENTS ?? 1000);
const SETTLE_MS = 1000;

export interface SseMemory { idleMiB: number; connectedMiB: number; connectSeconds: number }
export interface SseMemoryBench { clients: number; compiled: SseMemory; sources: SseMemory }

/** Resident set size of a process in MiB (Linux /proc). */
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) / 1024;
}

/** Why the figure cannot be taken on this machine, if it cannot. */
export function sseMemoryUnavailable(): string | undefined {
  return existsSync(`/proc/${process.pid}/status`) ? undefined : 'RSS is read from /proc/<pid>/status, which this OS lacks';
}

export async function benchSseMemory(redisUrl: string): Promise<SseMemoryBench> {
  buildCompiled();
  return { clients: SSE_CLIENTS, compiled: await measure(redisUrl, 'compiled'), sources: await measure(redisUrl, 'sources') };
}

async function measure(redisUrl: string, launcher: Launcher): Promise<SseMemory> {
  const prefix = `bsse${randomBytes(4).toString('hex')}`;
  // All the clients stream on one key: the per-key and per-scope stream caps are lifted to fit them.
  const caps = String(SSE_CLIENTS * 2);
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0', SUBMIT_RATE_PER_SEC: '0',
    SSE_MAX_PER_KEY: caps, SSE_MAX_PER_SCOPE: caps,
  };
  const api = await spawnBaton('api', env, [], launcher);
  const admin = new Redis(redisUrl);
  const stop = new AbortController();
  // Every client listens on it: a thousand listeners are expected.
  setMaxListeners(0, stop.signal);
  try {
    const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
    const client = new BatonClient({ url: api.url!, apiKey, scope: 'bench' });
    const run = await client.submit({ sessionId: 'fanout', input: { content: 'x' }, runtime: 'bench-idle', agent: 'echo' });
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const idleMiB = rssMiB(api.pid);
    let connected = 0;
    const t0 = performance.now();
    const everyone = new Promise<void>((resolve, reject) => {
      for (let i = 0; i < SSE_CLIENTS; i++) {
        void (async () => {
          let first = true;
          for await (const _ of client.stream(run.id, { signal: stop.signal })) {
            if (first && ++connected === SSE_CLIENTS) resolve();
            first = false;
          }
        })().catch((err) => { if (!stop.signal.aborted) reject(err); });
      }
    });
    await everyone;
    const connectSeconds = (performance.now() - t0) / 1000;
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    return { idleMiB, connectedMiB: rssMiB(api.pid), connectSeconds };
  } finally {
    stop.abort();
    await api.kill();
    await admin.quit();
  }
}

export function printSseMemory(r: SseMemoryBench): void {
  const line = (m: SseMemory) =>
    `${m.idleMiB.toFixed(0)} MiB idle, ${m.connectedMiB.toFixed(0)} MiB with ${r.clients} SSE clients connected ` +
    `(${(((m.connectedMiB - m.idleMiB) * 1024) / r.clients).toFixed(0)} KiB per client; all connected in ${m.connectSeconds.toFixed(1)} s)`;
  console.log(`\nAPI process RSS, compiled (bin/baton.js): ${line(r.compiled)}`);
  console.log(`API process RSS, from the sources through tsx: ${line(r.sources)}`);
}
