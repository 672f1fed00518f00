import { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
const r = new Redis('redis://127.0.0.1:7399');
const core = readFileSync('src/lib/engine/lua/core.lua', 'utf8');
const lib = core + '\n' + readFileSync('src/lib/engine/lua/lib.lua', 'utf8');
const O = JSON.stringify({ k: ['run'], maxLen: 50000, maxActive: 100000, graceMs: 10000, retention: 86400000, cancelChannel: 'p:cancel', base: 'p:{b}:', runId: 'rmx5o7dnz5ed32ec6c91133c2', fence: 1, batch: 1 });
// A function library: the lib text with its per-call prelude lines turned into assignments inside the function.
const fnLib = '#!lua name=probe\n' + lib
  .replace('local O = cjson.decode(ARGV[1])', 'local O, KEYS, ARGV')
  .replace('local K = {}\nfor i, name in ipairs(O.k) do K[name] = KEYS[i] end\nlocal BASE = O.base', 'local K, BASE')
  + `\nredis.register_function('noop', function(keys, args) KEYS = keys; ARGV = args; O = cjson.decode(args[1]); K = {}; for i, name in ipairs(O.k) do K[name] = keys[i] end; BASE = O.base; return 1 end)`;
try { await r.function('LOAD', 'REPLACE', fnLib); } catch (e) { console.log('load failed', (e as Error).message.slice(0, 300)); process.exit(1); }
const shas: Record<string, string> = {};
for (const [n, s] of [['trivial', 'return 1'], ['core+0', core + '\nreturn 1'], ['lib+0', lib + '\nreturn 1']]) shas[n] = (await r.script('LOAD', s)) as string;
const call = (n: string) => n === 'fcall lib' ? r.fcall('noop', 1, 'p:{b}:run:x', O) : r.evalsha(shas[n], 1, 'p:{b}:run:x', O);
const names = ['trivial', 'core+0', 'lib+0', 'fcall lib'];
const res: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
for (let round = 0; round < 8; round++) {
  for (const n of names) {
    await r.config('RESETSTAT');
    for (let i = 0; i < 2000; i++) await call(n);
    const info = await r.info('commandstats');
    const m = /cmdstat_(evalsha|fcall):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(info)!;
    res[n].push(Number(m[4]));
  }
}
for (const n of names) { const v = res[n].sort((a, b) => a - b); console.log(n.padEnd(10), 'median', v[4].toFixed(2), 'min', v[0].toFixed(2), 'us/call'); }
process.exit(0);
