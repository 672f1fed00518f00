import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { loadConfig } from '../src/lib/config.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { Transitions } from '../src/lib/engine/transitions.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { Attempt } from '../src/lib/engine/attempt.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createRedis, waitReady } from '../src/lib/redis.ts';
const url = 'redis://127.0.0.1:7399';
const prefix = `ab${randomBytes(3).toString('hex')}`;
const config = loadConfig({ REDIS_URL: url, BATON_KEY_PREFIX: prefix, RUNTIME: 'ph', LOG_LEVEL: 'silent', MAX_ACTIVE_PER_SCOPE: '100000', SUBMIT_RATE_PER_SEC: '0' });
const keys = createKeys(prefix);
const redis = createRedis({ url, name: 'ab' }); await waitReady(redis);
const admin = new Redis(url);
const t = new Transitions(redis, keys, config, new Dispatcher(redis, keys));
const store = new RunStore(redis, keys, config, t);
// The per-call-prelude form: each call's script inlines the helpers, as before the library.
const dir = 'src/lib/engine/lua/';
const coreOnly = readFileSync(dir + 'core.lua', 'utf8');
const helpers = coreOnly + '\n' + readFileSync(dir + 'lib.lua', 'utf8');
const sha: Record<string, string> = {};
for (const f of readdirSync(dir)) {
  const m = /^([a-z-]+)\.lua$/.exec(f); if (!m || m[1] === 'core' || m[1] === 'lib') continue;
  const src = `local __K, __A = KEYS, ARGV\n${['append', 'step', 'heartbeat'].includes(m[1]) ? coreOnly : helpers}\nbegin(__K, __A)\n${readFileSync(dir + f, 'utf8')}`;
  sha[`baton_${m[1].replace('-', '_')}_v4`] = (await redis.script('LOAD', src)) as string;
}
let mode = 'fcall';
const fcall = redis.fcall.bind(redis);
(redis as any).fcall = (fn: string, ...args: any[]) => mode === 'eval' ? redis.evalsha(sha[fn], ...args) : fcall(fn, ...args);
const N = 1000;
const res: Record<string, number[]> = {};
async function stat(label: string, fn: () => Promise<void>) {
  await admin.config('RESETSTAT');
  await fn();
  const info = await admin.info('commandstats');
  let us = 0, calls = 0;
  for (const l of info.split('\n')) { const m = /^cmdstat_(evalsha|fcall):calls=(\d+),usec=(\d+)/.exec(l); if (m) { us += +m[3]; calls += +m[2]; } }
  (res[`${label} ${mode}`] ??= []).push(us / calls);
}
let s = 0;
for (let round = 0; round < 9; round++) {
  for (const m of ['eval', 'fcall']) {
    mode = m;
    const cpu = async () => { const i = await admin.info('cpu'); return Number(/used_cpu_user:([\d.]+)/.exec(i)![1]) + Number(/used_cpu_sys:([\d.]+)/.exec(i)![1]); };
    const c0 = await cpu();
    const ids: string[] = [];
    await stat('submit', async () => { for (let i = 0; i < N; i++) ids.push((await store.submit({ scope: 'b', sessionId: `s${s++}`, input: { content: 'hello baton bench' }, runtime: 'ph', agent: 'echo' })).run.id); });
    const claims: any[] = [];
    await stat('claim', async () => { for (const id of ids) claims.push(await t.claim({ scope: 'b', runId: id }, 'w1', {}, { echo: 200 })); });
    await stat('append', async () => { for (const c of claims) await t.append(new Attempt(c.run, c.fence, keys.scope('b')), 1, [['token', '{"text":"hello"}']]); });
    await stat('finish', async () => { for (const c of claims) await t.finish(new Attempt(c.run, c.fence, keys.scope('b')), { status: 'succeeded', result: '{"answer":"done","finishReason":"stop","toolCallsSeen":0}', turn: ['{"role":"user","content":"hi"}', '{"role":"assistant","content":"done"}'] }); });
    (res[`cpu ${mode}`] ??= []).push(((await cpu()) - c0) * 1e6 / N);
  }
}
const med = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
console.log('Redis CPU (INFO cpu) per run of the four, incl. the stats calls: EVALSHA', med(res['cpu eval']).toFixed(0), 'us; FCALL', med(res['cpu fcall']).toFixed(0), 'us; all eval', res['cpu eval'].map((x) => x.toFixed(0)).join(','), 'all fcall', res['cpu fcall'].map((x) => x.toFixed(0)).join(','));
for (const p of ['submit', 'claim', 'append', 'finish']) console.log(p.padEnd(7), 'script call (EVALSHA, helpers inlined)', med(res[`${p} eval`]).toFixed(1), 'us; library (FCALL)', med(res[`${p} fcall`]).toFixed(1), 'us; saved', (med(res[`${p} eval`]) - med(res[`${p} fcall`])).toFixed(1));
await new Dispatcher(redis, keys).queue('ph').obliterate({ force: true }).catch(() => {});
process.exit(0);
