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
 *
 * The compiled API is then watched for SSE_HOLD_MS more with every client still connected: the
 * young generation V8 grew while a thousand connections arrived stays committed until V8
 * finds the process quiet and shrinks it, so the RSS right after the burst and the least RSS
 * over the minute after it (the cost of holding the clients, not of their arrival) are both
 * printed. A client whose stream ends in that minute fails the section.
 *
 * Last, the compiled API with a smaller young generation (`NODE_OPTIONS=--max-semi-space-size=4`,
 * V8's default being 16 MiB per semi-space on 64-bit), the knob docs/operations.md, "Memory of an API process",
 * describes: what it saves while the clients arrive.
 */
export const SSE_CLIENTS = Number(process.env.BENCH_SSE_CLIENTS ?? 1000);
const SETTLE_MS = 1000;
export const SSE_HOLD_MS = Number(process.env.BENCH_SSE_HOLD_MS ?? 60_000);

export interface SseMemory {
  idleMiB: number;
  connectedMiB: number;
  connectSeconds: number;
  /** The least RSS while every client stayed connected for SSE_HOLD_MS more, and when it was read. */
  held?: { minMiB: number; atSeconds: number; seconds: number };
}
export interface SseMemoryBench { clients: number; compiled: SseMemory; sources: SseMemory; smallYoung: SseMemory }

/** The NODE_OPTIONS of the last measurement. */
export const SMALL_YOUNG_GENERATION = '--max-semi-space-size=4';

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
  return {
    clients: SSE_CLIENTS,
    compiled: await measure(redisUrl, 'compiled', SSE_HOLD_MS),
    sources: await measure(redisUrl, 'sources', 0),
    smallYoung: await measure(redisUrl, 'compiled', 0, { NODE_OPTIONS: SMALL_YOUNG_GENERATION }),
  };
}

async function measure(redisUrl: string, launcher: Launcher, holdMs: number, moreEnv: Record<string, string> = {}): Promise<SseMemory> {
  const prefix = `bsse${randomBytes(4).toString('hex')}`;
  // All the clients stream on one key: the per-key and per-scope stream caps are lifted to fit them.
  const caps = String(SSE_CLIENTS * 2);
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0', SUBMIT_RATE_PER_SEC: '0',
    SSE_MAX_PER_KEY: caps, SSE_MAX_PER_SCOPE: caps, ...moreEnv,
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
    let ended = 0;
    const t0 = performance.now();
    const everyone = new Promise<void>((resolve, reject) => {
      for (let i = 0; i < SSE_CLIENTS; i++) {
        void (async () => {
          let first = true;
          for await (const _ of client.stream(run.id, { signal: stop.signal })) {
            if (first && ++connected === SSE_CLIENTS) resolve();
            first = false;
          }
          ended++;
        })().catch((err) => {
          ended++;
          if (!stop.signal.aborted) reject(err);
        });
      }
    });
    await everyone;
    const connectSeconds = (performance.now() - t0) / 1000;
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const connectedMiB = rssMiB(api.pid);
    if (holdMs <= 0) return { idleMiB, connectedMiB, connectSeconds };
    const held = { minMiB: connectedMiB, atSeconds: 0, seconds: holdMs / 1000 };
    const h0 = performance.now();
    while (performance.now() - h0 < holdMs) {
      await new Promise((r) => setTimeout(r, 1000));
      if (ended > 0) throw new Error(`${ended} of ${SSE_CLIENTS} SSE clients lost their stream while the API was watched`);
      const now = rssMiB(api.pid);
      if (now < held.minMiB) Object.assign(held, { minMiB: now, atSeconds: (performance.now() - h0) / 1000 });
    }
    return { idleMiB, connectedMiB, connectSeconds, held };
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
  const h = r.compiled.held;
  if (h) {
    console.log(`  then, every client still connected, the least RSS over ${h.seconds.toFixed(0)} s: ${h.minMiB.toFixed(0)} MiB ` +
      `(${h.atSeconds.toFixed(0)} s on; V8 shrinks the young generation once the process is quiet)`);
  }
  console.log(`API process RSS, from the sources through tsx: ${line(r.sources)}`);
  console.log(`API process RSS, compiled, NODE_OPTIONS=${SMALL_YOUNG_GENERATION}: ${line(r.smallYoung)}`);
}
