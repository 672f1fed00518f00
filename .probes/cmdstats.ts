import { Redis } from 'ioredis';
import { benchBaton } from '../bench/e2e.ts';
const url = 'redis://127.0.0.1:7399';
const admin = new Redis(url);
await admin.config('RESETSTAT');
const r = await benchBaton(url, { runs: 3000, warmup: 0, concurrency: 50, viaHttp: process.env.HTTP === '1' });
const info = await admin.info('commandstats');
const rows = info.split('\n').filter((l) => l.startsWith('cmdstat_')).map((l) => {
  const [name, rest] = l.slice(8).split(':');
  const f = Object.fromEntries(rest.trim().split(',').map((kv) => kv.split('=')));
  return { name, calls: Number(f.calls), usec: Number(f.usec), per: Number(f.usec_per_call) };
}).sort((a, b) => b.usec - a.usec);
const total = rows.filter((x) => !x.name.startsWith('eval')).reduce((s, x) => s + x.usec, 0);
console.log('runs', r.runs + 0, 'cpuUsPerRun', r.cpuUsPerRun?.toFixed(0), 'non-eval usec/run', (total / 3000).toFixed(1));
for (const x of rows.slice(0, 30)) console.log(x.name.padEnd(18), String((x.calls / 3000).toFixed(2)).padStart(7), 'calls/run', (x.usec / 3000).toFixed(1).padStart(7), 'usec/run', x.per.toFixed(2).padStart(7), 'usec/call');
process.exit(0);
