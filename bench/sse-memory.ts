import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
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
export interface SseMemoryBench { clients: number; compiled: SseMemory; sources: SseMemory; smallYoung: SseMemory; stalled: StalledReaders }

/** Readers that never read a finished run's large log (see measureStalled). */
export interface StalledReaders {
  readers: number;
  logBytes: number;
  largestEvent: number;
  /** baton_sse_buffered_bytes over the readers, and baton_sse_buffered_bytes_max: what the API counts it holds. */
  heldPerReader: number;
  mostHeld: number;
  /** baton_sse_log_read_bytes_total over the readers: what they made the API read from Redis (most of it the kernel's buffers took). */
  readPerReader: number;
  /** The API's heap used and external memory (prom-client's, no collection forced), per reader, over what they were before the readers. */
  heapPerReader: number;
  externalPerReader: number;
  /** The API's RSS over what it was before the readers, 5 s after they connected and at its highest, MiB. */
  rssAt5sMiB: number;
  rssPeakMiB: number;
}
export const STALLED_READERS = Number(process.env.BENCH_SSE_STALLED ?? 200);
/** 96 token events of 64 Ki characters: a 6 MB log. */
const STALLED_LOG = { tokens: 96, chars: 64 * 1024 };
const AGENTS = fileURLToPath(new URL('./bench-agents.ts', import.meta.url));

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
    stalled: await measureStalled(redisUrl),
  };
}

/** /metrics of an API, on a connection of its own closed after the answer (no pool holding one open). */
function metricsOf(url: string): Promise<Map<string, number>> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(port), hostname);
    let text = '';
    s.setEncoding('utf8');
    s.on('data', (c) => { text += c; });
    s.on('end', () => {
      const out = new Map<string, number>();
      for (const m of text.matchAll(/^([a-z_]+)(?:\{[^}]*\})? (\S+)$/gm)) out.set(m[1], (out.get(m[1]) ?? 0) + Number(m[2]));
      resolve(out);
    });
    s.on('error', reject);
    s.write('GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
  });
}

/**
 * STALLED_READERS raw sockets that send a stream request for a finished run's 6 MB log (token
 * events of 64 Ki characters) and never read a byte, on a fresh compiled API: what the API
 * counts it holds for them (baton_sse_buffered_bytes), what they made it read from Redis
 * (the kernel's socket buffers of each connection take most of it), its heap and external
 * memory once they all stalled, and its RSS 5 s after they connected (the figure of issue 39)
 * and at its highest.
 */
export async function measureStalled(redisUrl: string): Promise<StalledReaders> {
  const prefix = `bstall${randomBytes(4).toString('hex')}`;
  const caps = String(STALLED_READERS * 2);
  const env = {
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0', SUBMIT_RATE_PER_SEC: '0',
    SSE_MAX_PER_KEY: caps, SSE_MAX_PER_SCOPE: caps, SSE_STALL_MS: '120000',
  };
  const [api, worker] = await Promise.all([spawnBaton('api', env, [], 'compiled'), spawnBaton('worker', env, [AGENTS])]);
  const admin = new Redis(redisUrl);
  const sockets: Socket[] = [];
  try {
    const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
    const client = new BatonClient({ url: api.url!, apiKey, scope: 'bench' });
    const run = await client.submit({ sessionId: 'large', input: { content: 'x' }, runtime: 'bench', agent: 'bench-streamer', metadata: { mode: 'large', ...STALLED_LOG } });
    let logBytes = 0;
    let largestEvent = 0;
    for await (const e of client.stream(run.id)) {
      const size = e.id.length + e.type.length + JSON.stringify(e.data).length;
      logBytes += size;
      largestEvent = Math.max(largestEvent, size);
    }
    await worker.stop();
    await new Promise((r) => setTimeout(r, 6_000)); // the client's keep-alive connection closes
    const before = await metricsOf(api.url!);
    const rss0 = rssMiB(api.pid);
    let peak = rss0;
    const sample = setInterval(() => { peak = Math.max(peak, rssMiB(api.pid)); }, 100);
    try {
      const { hostname, port } = new URL(api.url!);
      for (let i = 0; i < STALLED_READERS; i++) {
        const s = connect(Number(port), hostname);
        s.on('error', () => {});
        s.pause();
        s.write(`GET /v1/scopes/bench/runs/${run.id}/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${apiKey}\r\naccept: text/event-stream\r\n\r\n`);
        sockets.push(s);
      }
      await new Promise((r) => setTimeout(r, 5_000));
      const rssAt5s = rssMiB(api.pid);
      // Stalled once every stream is open and none reads more of its log between two scrapes.
      let now = before;
      for (let last = -1, tries = 0; ; tries++) {
        now = await metricsOf(api.url!);
        const read = now.get('baton_sse_log_read_bytes_total') ?? 0;
        if ((now.get('baton_sse_clients') ?? 0) === STALLED_READERS && read === last) break;
        if (tries > 120) throw new Error(`the ${STALLED_READERS} readers did not stall within a minute`);
        last = read;
        await new Promise((r) => setTimeout(r, 500));
      }
      const per = (name: string) => ((now.get(name) ?? 0) - (before.get(name) ?? 0)) / STALLED_READERS;
      return {
        readers: STALLED_READERS, logBytes, largestEvent,
        heldPerReader: per('baton_sse_buffered_bytes'), mostHeld: now.get('baton_sse_buffered_bytes_max') ?? 0,
        readPerReader: per('baton_sse_log_read_bytes_total'),
        heapPerReader: per('nodejs_heap_size_used_bytes'), externalPerReader: per('nodejs_external_memory_bytes'),
        rssAt5sMiB: rssAt5s - rss0, rssPeakMiB: peak - rss0,
      };
    } finally {
      clearInterval(sample);
    }
  } finally {
    for (const s of sockets) s.destroy();
    await Promise.all([api.kill(), worker.kill()]);
    await admin.quit();
  }
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
  const st = r.stalled;
  const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
  console.log(`${st.readers} readers that never read a finished ${(st.logBytes / 1e6).toFixed(1)} MB log (events up to ${kib(st.largestEvent)}), compiled API: ` +
    `held ${kib(st.heldPerReader)} per reader as counted (most ${kib(st.mostHeld)}), read from Redis ${kib(st.readPerReader)} per reader (the rest in the kernel's socket buffers); ` +
    `heap +${kib(st.heapPerReader)} and external +${kib(st.externalPerReader)} per reader once all stalled (no collection forced); ` +
    `RSS +${st.rssAt5sMiB.toFixed(0)} MiB 5 s after they connected, +${st.rssPeakMiB.toFixed(0)} MiB at most`);
}
