import { setMaxListeners } from 'node:events';
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { createKeys } from '../src/lib/keys.ts';
import { buildCompiled, spawnBaton } from '../bench/processes.ts';
const N = Number(process.env.N ?? 1000);
const rss = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
buildCompiled();
const prefix = `bsse${randomBytes(4).toString('hex')}`;
const redisUrl = 'redis://127.0.0.1:6379';
const api = await spawnBaton('api', { REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, PORT: '0', LOG_LEVEL: 'warn', METRICS_PORT: '0', SUBMIT_RATE_PER_SEC: '0', SSE_MAX_PER_KEY: String(2*N), SSE_MAX_PER_SCOPE: String(2*N), NODE_OPTIONS: `--require ${process.cwd()}/.probes/mem.cjs ${process.env.XOPT ?? ''}` }, [], 'compiled');
const admin = new Redis(redisUrl);
const stop = new AbortController(); setMaxListeners(0, stop.signal);
const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
const client = new BatonClient({ url: api.url!, apiKey, scope: 'bench' });
const run = await client.submit({ sessionId: 'fanout', input: { content: 'x' }, runtime: 'bench-idle', agent: 'echo' });
await new Promise((r) => setTimeout(r, 1000));
process.kill(api.pid, 'SIGUSR2'); if (process.env.SNAP) { process.kill(api.pid, 'SIGUSR1'); await new Promise((r) => setTimeout(r, 4000)); }
console.log('idle', rss(api.pid).toFixed(1));
let connected = 0;
await new Promise<void>((resolve) => { for (let i = 0; i < N; i++) void (async () => { let first = true; for await (const _ of client.stream(run.id, { signal: stop.signal })) { if (first && ++connected === N) resolve(); first = false; } })().catch(() => {}); });
await new Promise((r) => setTimeout(r, 1000));
console.log('connected', rss(api.pid).toFixed(1)); for (let i = 0; i < 25; i++) { await new Promise((r) => setTimeout(r, 2000)); console.log(`+${2*(i+1)}s`, rss(api.pid).toFixed(1), (await import('node:child_process')).execSync(`ss -tnH state established '( sport = :${new URL(api.url!).port} )' | wc -l`).toString().trim()); }
process.kill(api.pid, 'SIGUSR2'); if (process.env.SNAP) { process.kill(api.pid, 'SIGUSR1'); await new Promise((r) => setTimeout(r, 4000)); }
await new Promise((r) => setTimeout(r, 300));
console.log(readFileSync(`/tmp/mem-${api.pid}.txt`, 'utf8'));
stop.abort(); await api.kill(); await admin.quit(); process.exit(0);
