import { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
const url = 'redis://127.0.0.1:7399';
const r = new Redis(url);
const core = readFileSync('src/lib/engine/lua/core.lua', 'utf8');
const lib = core + '\n' + readFileSync('src/lib/engine/lua/lib.lua', 'utf8');
const O = JSON.stringify({ k: ['run', 'meta', 'ready', 'pending', 'leases', 'timers'], maxLen: 50000, maxActive: 100000, graceMs: 10000, retention: 86400000, cancelChannel: 'p:cancel', base: 'p:{bench}:', runId: 'rmx5o7dnz5ed32ec6c91133c2', fence: 1, status: 'succeeded', result: '{"answer":"done","finishReason":"stop","toolCallsSeen":1}' });
const variants: Record<string, string> = {
  trivial: 'return 1',
  decode: 'local O = cjson.decode(ARGV[1]) return 1',
  core: core + '\nreturn 1',
  lib: lib + '\nreturn 1',
};
const keys = ['p:{bench}:run:x', 'p:{bench}:meta', 'p:{bench}:ready', 'p:{bench}:pending', 'p:{bench}:leases', 'p:{bench}:timers'];
for (const [name, src] of Object.entries(variants)) {
  const sha = (await r.script('LOAD', src)) as string;
  for (let i = 0; i < 500; i++) await r.evalsha(sha, keys.length, ...keys, O);
  await r.config('RESETSTAT');
  const N = 5000;
  const ps = [];
  for (let i = 0; i < N; i++) ps.push(r.evalsha(sha, keys.length, ...keys, O));
  await Promise.all(ps);
  const info = await r.info('commandstats');
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(info)!;
  console.log(name.padEnd(10), m[3], 'us/call');
}
process.exit(0);
