import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { loadConfig } from '../src/lib/config.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { Transitions } from '../src/lib/engine/transitions.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { Attempt } from '../src/lib/engine/attempt.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createRedis, waitReady } from '../src/lib/redis.ts';
const url = 'redis://127.0.0.1:7399';
const prefix = `ph${randomBytes(3).toString('hex')}`;
const config = loadConfig({ REDIS_URL: url, BATON_KEY_PREFIX: prefix, RUNTIME: 'ph', LOG_LEVEL: 'silent', MAX_ACTIVE_PER_SCOPE: '100000', SUBMIT_RATE_PER_SEC: '0' });
const keys = createKeys(prefix);
const redis = createRedis({ url, name: 'ph' }); await waitReady(redis);
const admin = new Redis(url);
const dispatcher = new Dispatcher(redis, keys);
const t = new Transitions(redis, keys, config, dispatcher);
const store = new RunStore(redis, keys, config, t);
const N = Number(process.env.N ?? 3000);
async function stat(label: string, fn: () => Promise<void>) {
  await admin.config('RESETSTAT');
  await fn();
  const info = await admin.info('commandstats');
  let evalUs = 0, evalCalls = 0, inner = 0, innerCalls = 0;
  for (const l of info.split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(l); if (!m) continue;
    if (m[1] === 'evalsha' || m[1] === 'fcall') { evalUs += +m[3]; evalCalls += +m[2]; } else if (m[1] !== 'config|resetstat' && m[1] !== 'info') { inner += +m[3]; innerCalls += +m[2]; }
  }
  console.log(label.padEnd(8), 'evalsha', (evalUs / evalCalls).toFixed(1), 'us/call; inner', (inner / evalCalls).toFixed(1), 'us in', (innerCalls / evalCalls).toFixed(1), 'cmds; Lua+glue', ((evalUs - inner) / evalCalls).toFixed(1), 'us');
}
// warm
for (let i = 0; i < 200; i++) await store.submit({ scope: 'b', sessionId: `w${i}`, input: { content: 'hi' }, runtime: 'ph', agent: 'echo' });
const ids: string[] = [];
await stat('submit', async () => { for (let i = 0; i < N; i++) ids.push((await store.submit({ scope: 'b', sessionId: `s${i}`, input: { content: 'hello baton bench' }, runtime: 'ph', agent: 'echo' })).run.id); });
const claims: any[] = [];
await stat('claim', async () => { for (const id of ids) claims.push(await t.claim({ scope: 'b', runId: id }, 'w1', {}, { echo: 200 })); });
await stat('append', async () => { for (const c of claims) await t.append(new Attempt(c.run, c.fence, keys.scope('b')), 1, [['token', '{"text":"hello"}']]); });
await stat('finish', async () => { for (const c of claims) await t.finish(new Attempt(c.run, c.fence, keys.scope('b')), { status: 'succeeded', result: '{"answer":"done","finishReason":"stop","toolCallsSeen":0}', turn: ['{"role":"user","content":"hi"}', '{"role":"assistant","content":"done"}'] }); });
{
  const { readFileSync } = await import('node:fs');
  const core = readFileSync('src/lib/engine/lua/core.lua', 'utf8');
  const lib = core + '\n' + readFileSync('src/lib/engine/lua/lib.lua', 'utf8');
  const O = JSON.stringify({ k: ['run'], maxLen: 50000, maxActive: 100000, graceMs: 10000, retention: 86400000, cancelChannel: 'p:cancel', base: 'p:{b}:', runId: 'rmx5o7dnz5ed32ec6c91133c2', fence: 1, batch: 1 });
  for (const [name, src] of [['trivial', 'return 1'], ['core+0', core + '\nreturn 1'], ['lib+0', lib + '\nreturn 1']] as const) {
    const sha = (await redis.script('LOAD', src)) as string;
    await stat(name, async () => { for (let i = 0; i < N; i++) await redis.evalsha(sha, 1, 'p:{b}:run:x', O, 'token', '{"text":"hello"}'); });
  }
}
await dispatcher.queue('ph').obliterate({ force: true }).catch(() => {});
process.exit(0);
