import { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
const r = new Redis('redis://127.0.0.1:7399');
const core = readFileSync('src/lib/engine/lua/core.lua', 'utf8');
const lib = core + '\n' + readFileSync('src/lib/engine/lua/lib.lua', 'utf8');
const O = JSON.stringify({ k: ['run', 'meta', 'ready', 'pending', 'leases', 'timers'], maxLen: 50000, maxActive: 100000, graceMs: 10000, retention: 86400000, cancelChannel: 'p:cancel', base: 'p:{bench}:', runId: 'rmx5o7dnz5ed32ec6c91133c2', fence: 1 });
await r.hset('p:{bench}:run:x', { a: 1, b: 2, status: 'running', fence: '1', leaseOwner: 'w' });
const variants: Record<string, string> = {
  'lib+0': lib + '\nreturn 1',
  'lib+10 HGET': lib + `\nfor i=1,10 do redis.call('HGET', KEYS[1], 'a') end return 1`,
  'lib+10 TIME': lib + `\nfor i=1,10 do redis.call('TIME') end return 1`,
  'lib+10 pcall HGET': lib + `\nfor i=1,10 do redis.pcall('HGET', KEYS[1], 'a') end return 1`,
  'lib+10 encode': lib + `\nfor i=1,10 do cjson.encode({prev='1-0', events={{'1-1','token','{"text":"hello"}'}}}) end return 1`,
  'lib+10 concat': lib + `\nfor i=1,10 do local s = BASE .. 'run:' .. O.runId .. ':events' .. i end return 1`,
};
const keys = ['p:{bench}:run:x', 'p:{bench}:meta', 'p:{bench}:ready', 'p:{bench}:pending', 'p:{bench}:leases', 'p:{bench}:timers'];
for (const [name, src] of Object.entries(variants)) {
  const sha = (await r.script('LOAD', src)) as string;
  for (let i = 0; i < 500; i++) await r.evalsha(sha, keys.length, ...keys, O);
  await r.config('RESETSTAT');
  const ps = [];
  for (let i = 0; i < 5000; i++) ps.push(r.evalsha(sha, keys.length, ...keys, O));
  await Promise.all(ps);
  const info = await r.info('commandstats');
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(info)!;
  const h = /cmdstat_hget:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(info);
  console.log(name.padEnd(20), m[3], 'us/call', h ? `(hget itself ${h[3]} us/call)` : '');
}
process.exit(0);
