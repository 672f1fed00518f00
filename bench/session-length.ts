import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { RedisArtifactStore } from '../src/lib/artifacts/redis-store.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { RunExecutor } from '../src/lib/engine/executor.ts';
import { LeaseKeeper } from '../src/lib/engine/lease-keeper.ts';
import { submitDoor } from '../test/helpers/submit.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis, waitReady } from '../src/lib/redis/redis.ts';
import { deleteByPrefix, percentileOf } from './redis-stats.ts';
import { printTable, ratio } from './table.ts';

/**
 * Does a run cost more in a longer session? Sessions of 10, 1,000 and 10,000 turns (a
 * turn is a user and an assistant message of 400 characters each, written straight into
 * the built-in store's list), then BENCH_SESSION_REPEATS runs (default 30) in each, one
 * after another and taking the sizes in turn, executed by a RunExecutor in this process. "Claim" is what
 * bench/transitions.ts calls it: from the delivery to the agent's first line (the claim
 * script and whatever the worker does with its reply before the agent starts); its bytes
 * are what the worker's connection read in that time (the socket's bytesRead). The agent
 * uses the built-in store with its default settings and answers nothing, so the session
 * does not grow while it is measured.
 */
const SIZES = [10, 1_000, 10_000];
const REPEATS = Number(process.env.BENCH_SESSION_REPEATS ?? 30);
const MESSAGE_CHARS = 400;

export interface SessionLengthRow { turns: number; claimMs: number; replyBytes: number; historySeen: number }

export async function benchSessionLength(redisUrl: string): Promise<SessionLengthRow[]> {
  const prefix = `blen${randomBytes(4).toString('hex')}`;
  const runtime = 'blen';
  // No heartbeat during the measurement: a beat's reply would be counted as the claim's.
  const config = loadConfig({
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: runtime, LOG_LEVEL: 'silent',
    LEASE_MS: '600000', HEARTBEAT_MS: '590000', MAX_ACTIVE_PER_SCOPE: '100000',
  });
  const keys = createKeys(prefix);
  const sk = keys.scope('bench');
  const log = createLogger('silent');
  const admin = new Redis(redisUrl);
  const setup = createRedis({ url: redisUrl, name: 'bench-setup' });
  const worker = createRedis({ url: redisUrl, name: 'bench-worker' });
  const subscriber = createRedis({ url: redisUrl, name: 'bench-sub', blocking: true });
  await Promise.all([waitReady(setup), waitReady(worker)]);
  const setupDispatcher = new Dispatcher(setup, keys);
  const door = submitDoor(setup, keys, config, gateways(setup, keys, config, setupDispatcher).api);
  const dispatcher = new Dispatcher(worker, keys);
  const g = gateways(worker, keys, config, dispatcher);
  const leases = new LeaseKeeper(g.worker, subscriber, keys.cancelChannel, config.LEASE_MS, config.HEARTBEAT_MS, log);
  await leases.start();

  /** What the agent found at its first line, once per run. */
  const seen: { at: number; bytes: number; history: number }[] = [];
  const probe = defineAgent({
    name: 'bench-claim-probe',
    run(ctx) {
      seen.push({ at: performance.now(), bytes: worker.stream.bytesRead, history: ctx.history.length });
      return '';
    },
  });
  const executor = new RunExecutor({
    redis: worker, keys, config, transitions: g.worker, flow: g.flow, leases, agents: new Map([[probe.name, probe]]), workerId: 'bench-worker', log,
    artifacts: new RedisArtifactStore(worker, keys, g.api, config),
  });
  const claim = async (sessionId: string) => {
    const runId = (await door.submit({ scope: 'bench', sessionId, input: { content: 'q' }, runtime, agent: probe.name })).run.id;
    seen.length = 0;
    const bytes0 = worker.stream.bytesRead;
    const t0 = performance.now();
    await executor.execute({ scope: 'bench', runId, dispatch: 1 });
    const [first] = seen;
    if (!first) throw new Error(`run ${runId} never reached its agent`);
    return { ms: first.at - t0, bytes: first.bytes - bytes0, history: first.history };
  };

  try {
    // The first call on a fresh server loads the transitions library (Function not found, FUNCTION LOAD, the call again).
    await claim('warm-up');
    for (const turns of SIZES) await fillSession(setup, sk.messages(`turns-${turns}`), turns);
    // Round-robin over the sizes, so a drift of the machine's speed (or the process warming
    // up) during the measurement falls on every size alike, not on whichever came last.
    const samples = new Map(SIZES.map((turns) => [turns, [] as Awaited<ReturnType<typeof claim>>[]]));
    for (let r = 0; r < REPEATS; r++) {
      for (const turns of SIZES) samples.get(turns)!.push(await claim(`turns-${turns}`));
    }
    return SIZES.map((turns) => {
      const of = samples.get(turns)!;
      return {
        turns,
        claimMs: percentileOf(of.map((s) => s.ms), 50),
        replyBytes: percentileOf(of.map((s) => s.bytes), 50),
        historySeen: of[0].history,
      };
    });
  } finally {
    await leases.stop();
    await setupDispatcher.queue(runtime, probe.name).obliterate({ force: true }).catch(() => {});
    await Promise.all([setupDispatcher.close(), dispatcher.close()]);
    await deleteByPrefix(admin, prefix);
    await Promise.all([admin.quit(), setup.quit(), worker.quit(), subscriber.quit()]);
  }
}

/** `turns` committed turns, as the finish transition writes them (one JSON message per list entry). */
async function fillSession(redis: Redis, key: string, turns: number): Promise<void> {
  const text = (i: number) => `${i} `.padEnd(MESSAGE_CHARS, 'lorem ipsum dolor sit amet ');
  const at = Date.now();
  for (let from = 0; from < turns; from += 500) {
    const messages: string[] = [];
    for (let i = from; i < Math.min(turns, from + 500); i++) {
      const runId = `r${i}`;
      messages.push(
        JSON.stringify({ role: 'user', content: text(i), runId, createdAt: at }),
        JSON.stringify({ role: 'assistant', content: text(i), runId, createdAt: at }),
      );
    }
    await redis.rpush(key, ...messages);
  }
}

export function printSessionLength(rows: SessionLengthRow[]): void {
  console.log(`\nclaim (delivery → agent's first line) by session length, p50 of ${REPEATS} runs each; messages of ${MESSAGE_CHARS} characters`);
  const first = rows[0];
  printTable('session', Object.fromEntries(rows.map((r) => [`${r.turns} turns`, {
    'claim ms': r.claimMs.toFixed(2),
    'bytes read': r.replyBytes,
    'messages the agent saw': r.historySeen,
    [`time vs ${first.turns} turns`]: ratio(r.claimMs, first.claimMs),
    [`bytes vs ${first.turns} turns`]: ratio(r.replyBytes, first.replyBytes),
  }])));
}
