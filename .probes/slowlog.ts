import { Redis } from 'ioredis';
import { createHash } from 'node:crypto';
import { benchBaton } from '../bench/e2e.ts';
const url = 'redis://127.0.0.1:7399';
const admin = new Redis(url);
await admin.config('SET', 'slowlog-log-slower-than', '0');
await admin.config('SET', 'slowlog-max-len', '200000');
await admin.slowlog('RESET');
const N = 1000;
await benchBaton(url, { runs: N, warmup: 0, concurrency: 50, viaHttp: false });
const log = (await admin.slowlog('GET', -1)) as [number, number, number, string[]][];
await admin.config('SET', 'slowlog-log-slower-than', '10000');
const shaName = new Map<string, string>();
// Baton's scripts as loaded: read from a connection with them registered
const { createRedis } = await import('../src/lib/redis.ts');
const c = createRedis({ url, name: 'x' }) as any;
for (const k of Object.keys(c.scriptsSet ?? {})) { const s = c.scriptsSet[k]; shaName.set(s.sha, k); }
const agg = new Map<string, { n: number; us: number }>();
for (const [, , us, args] of log) {
  let name = String(args[0]).toLowerCase();
  if (name === 'evalsha') name = 'evalsha:' + (shaName.get(String(args[1])) ?? String(args[1]).slice(0, 8));
  const e = agg.get(name) ?? { n: 0, us: 0 }; e.n++; e.us += us; agg.set(name, e);
}
const rows = [...agg].sort((a, b) => b[1].us - a[1].us);
for (const [n, e] of rows.slice(0, 25)) console.log(n.padEnd(40), (e.n / N).toFixed(2).padStart(6), 'calls/run', (e.us / N).toFixed(1).padStart(7), 'us/run', (e.us / e.n).toFixed(1).padStart(7), 'us/call');
process.exit(0);
