import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/lib/config/index.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import type { ClaimReply } from '../src/lib/transitions/claim.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { bodyOpening, functionName, luaSources, type ScriptName } from '../src/lib/transitions/scripts.ts';
import { submitDoor } from '../test/helpers/submit.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createRedis, waitReady } from '../src/lib/redis/redis.ts';
import { deleteByPrefix, percentileOf, withBenchRedis } from './redis-stats.ts';
import { printTable } from './table.ts';

/**
 * What Redis spends running each transition, as the library's functions (FCALL) and as
 * scripts that inline the helpers before the same body (EVALSHA; how the transitions ran
 * before the library): the same gateway calls, the connection's `fcall` pointed at the
 * scripts for the inlined rounds. Rounds of ROUND_RUNS runs (submit, claim, one append,
 * finish each) alternate between the two, so a drift of the machine falls on both; the
 * figure is the median over the rounds of `INFO commandstats` µs per call (the call and the
 * commands it runs, not reading the request or writing the reply). Needs a Redis nothing else
 * uses (the bench's own).
 */
const ROUNDS = 7;
const ROUND_RUNS = 500;
const PHASES = ['submit', 'claim', 'append', 'finish'] as const;
type Phase = (typeof PHASES)[number];
type Form = 'inlined' | 'library';

export type LibraryCost = Record<Phase, Record<Form, number>>;

/** The transitions as scripts: the helpers inlined before each body, with begin() run on the script's KEYS and ARGV. */
function inlinedScripts(): Map<string, string> {
  const { codes, helpers, bodies } = luaSources();
  // The hot transitions inlined the call's core only (transitions/lib/call.lua, records.lua and events.lua).
  const coreOnly = new Set(['append', 'step', 'heartbeat']);
  const core = helpers.slice(0, 3).map(([, text]) => text).join('\n');
  const all = helpers.map(([, text]) => text).join('\n');
  const out = new Map<string, string>();
  for (const [name, body] of bodies) {
    const inlined = `${codes}\n${coreOnly.has(name) ? core : all}`;
    out.set(functionName(name as ScriptName), `local keys, args = KEYS, ARGV\n${inlined}\n${bodyOpening(body)}\n${body}`);
  }
  return out;
}

export async function benchLibraryCost(redisUrl: string): Promise<LibraryCost> {
  const prefix = `blib${randomBytes(4).toString('hex')}`;
  const config = loadConfig({
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'blib', LOG_LEVEL: 'silent', MAX_ACTIVE_PER_SCOPE: '100000', SUBMIT_RATE_PER_SEC: '0',
  });
  const keys = createKeys(prefix);
  const admin = new Redis(redisUrl);
  const redis = createRedis({ url: redisUrl, name: 'bench-library' });
  await waitReady(redis);
  const dispatcher = new Dispatcher(redis, keys);
  const g = gateways(redis, keys, config, dispatcher);
  const door = submitDoor(redis, keys, config, g.api);
  const shas = new Map<string, string>();
  for (const [name, source] of inlinedScripts()) shas.set(name, (await redis.script('LOAD', source)) as string);
  let form: Form = 'library';
  const fcall = redis.fcall.bind(redis) as (...a: unknown[]) => Promise<unknown>;
  const evalsha = redis.evalsha.bind(redis) as (...a: unknown[]) => Promise<unknown>;
  redis.fcall = ((name: string, ...args: unknown[]) =>
    form === 'inlined' ? evalsha(shas.get(name), ...args) : fcall(name, ...args)) as typeof redis.fcall;

  const samples = Object.fromEntries(PHASES.map((p) => [p, { inlined: [] as number[], library: [] as number[] }])) as
    Record<Phase, Record<Form, number[]>>;
  const timed = async (phase: Phase, fn: () => Promise<void>) => {
    await admin.config('RESETSTAT');
    await fn();
    let usec = 0;
    let calls = 0;
    for (const line of (await admin.info('commandstats')).split('\n')) {
      const m = /^cmdstat_(?:evalsha|fcall):calls=(\d+),usec=(\d+)/.exec(line);
      if (m) { calls += Number(m[1]); usec += Number(m[2]); }
    }
    samples[phase][form].push(usec / calls);
  };
  const scope = keys.scope('bench');
  const turn: [string, string] = ['{"role":"user","content":"hi"}', '{"role":"assistant","content":"done"}'];
  let session = 0;
  try {
    // Both forms once, unmeasured: the library's load and the scripts' first calls.
    for (const f of ['library', 'inlined', 'library'] as Form[]) {
      form = f;
      await door.submit({ scope: 'bench', sessionId: `warm-${session++}`, input: { content: 'x' }, runtime: 'blib', agent: 'echo' });
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const f of ['inlined', 'library'] as Form[]) {
        form = f;
        const ids: string[] = [];
        await timed('submit', async () => {
          for (let i = 0; i < ROUND_RUNS; i++) {
            ids.push((await door.submit({ scope: 'bench', sessionId: `s${session++}`, input: { content: 'hello baton bench' }, runtime: 'blib', agent: 'echo' })).run.id);
          }
        });
        const attempts: Attempt[] = [];
        await timed('claim', async () => {
          for (const runId of ids) {
            const c: ClaimReply = await g.worker.claim({ scope: 'bench', runId }, 'bench-worker', {}, { echo: 200 });
            if (c.kind !== 'claimed') throw new Error(`run ${runId} not claimed: ${c.kind}`);
            attempts.push(new Attempt(c.run, c.fence, scope));
          }
        });
        await timed('append', async () => {
          for (const a of attempts) await g.worker.append(a, 1, [['token', '{"text":"hello"}']]);
        });
        await timed('finish', async () => {
          for (const a of attempts) {
            await g.worker.of(a).finish({ status: 'succeeded', result: '{"answer":"hello","finishReason":"stop","toolCallsSeen":0}', turn });
          }
        });
      }
    }
  } finally {
    await dispatcher.queue('blib', 'echo').obliterate({ force: true }).catch(() => {});
    await dispatcher.close();
    await deleteByPrefix(admin, prefix);
    await Promise.all([admin.quit(), redis.quit()]);
  }
  return Object.fromEntries(PHASES.map((p) => [p, {
    inlined: percentileOf(samples[p].inlined, 50), library: percentileOf(samples[p].library, 50),
  }])) as LibraryCost;
}

export function printLibraryCost(c: LibraryCost): void {
  console.log(`\nRedis time per transition call, µs (INFO commandstats, median of ${ROUNDS} alternating rounds of ${ROUND_RUNS} runs): helpers inlined in each script, and the function library`);
  printTable('transition', Object.fromEntries(PHASES.map((p) => [p, {
    'inlined script': c[p].inlined.toFixed(1),
    library: c[p].library.toFixed(1),
    saved: (c[p].inlined - c[p].library).toFixed(1),
  }])));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await withBenchRedis(async (url) => printLibraryCost(await benchLibraryCost(url)));
}
