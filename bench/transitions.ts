import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { defineAgent, type RunContext } from '../src/lib/sdk/agent.ts';
import { loadConfig } from '../src/lib/config/index.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { createKeys } from '../src/lib/keys.ts';
import { LeaseKeeper } from '../src/lib/engine/lease-keeper.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis, waitReady } from '../src/lib/redis/redis.ts';
import { RunExecutor } from '../src/lib/engine/executor.ts';
import { RedisArtifactStore } from '../src/lib/artifacts/redis-store.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { submitDoor } from '../test/helpers/submit.ts';
import { deleteByPrefix, totalCommands, withBenchRedis } from './redis-stats.ts';
import { printTable } from './table.ts';

/**
 * Redis round trips per run transition, measured on the real code path: a RunExecutor runs
 * an agent whose phases are fenced off by snapshots, on a connection that counts what it
 * sends. A round trip is one request the client waits for (a pipeline counts once);
 * `commands` adds what Redis executed for it, scripts' inner calls included (INFO
 * commandstats deltas, so run this against a Redis nothing else is using).
 *
 * - claim: from the delivery to the agent's first line (the claim script, which also returns
 *   the session history the agent sees)
 * - step: one idempotent memoized step that misses (its result write)
 * - step (non-idempotent): start marker, then result
 * - finish: from the agent's return to the terminal status (finish script with the history commit)
 * - heartbeat: one beat for `HELD` runs at once (one pipeline)
 */
const SAMPLES = 50;
const HELD = 10;

interface Counter { roundTrips: number; commands: number }

/** Counts what `redis` sends: each command, and each wait for a reply (pipelines once). */
function countOn(redis: Redis): Counter {
  const counter: Counter = { roundTrips: 0, commands: 0 };
  const pipelines = new WeakSet<object>();
  const send = redis.sendCommand.bind(redis);
  redis.sendCommand = ((command: unknown, stream?: { isPipeline?: boolean }, node?: unknown) => {
    counter.commands++;
    if (stream?.isPipeline) {
      if (!pipelines.has(stream)) { pipelines.add(stream); counter.roundTrips++; }
    } else {
      counter.roundTrips++;
    }
    return (send as (...a: unknown[]) => unknown)(command, stream, node);
  }) as typeof redis.sendCommand;
  return counter;
}

interface Snapshot { roundTrips: number; server: number }

export interface TransitionCost { roundTrips: number; commands: number }
export interface TransitionCosts {
  claim: TransitionCost;
  step: TransitionCost;
  stepNonIdempotent: TransitionCost;
  finish: TransitionCost;
  /** One beat for `held` runs: its round trips, and commands for all of them. */
  heartbeat: TransitionCost & { held: number };
}

export async function benchTransitions(redisUrl: string): Promise<TransitionCosts> {
  const prefix = `tbench${randomBytes(4).toString('hex')}`;
  const runtime = 'tbench';
  // Heartbeats only when the bench asks for one: a timer beat would land in another phase.
  const config = loadConfig({
    REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: runtime, LOG_LEVEL: 'silent',
    LEASE_MS: '600000', HEARTBEAT_MS: '590000', MAX_ACTIVE_PER_SCOPE: '100000',
  });
  const keys = createKeys(prefix);
  const log = createLogger('silent');
  const admin = new Redis(redisUrl);
  const setup = createRedis({ url: redisUrl, name: 'bench-setup' });
  const redis = createRedis({ url: redisUrl, name: 'bench-counted' });
  const subscriber = createRedis({ url: redisUrl, name: 'bench-sub', blocking: true });
  await Promise.all([waitReady(setup), waitReady(redis)]);
  const setupDispatcher = new Dispatcher(setup, keys);
  const door = submitDoor(setup, keys, config, gateways(setup, keys, config, setupDispatcher).api);
  const dispatcher = new Dispatcher(redis, keys);
  const g = gateways(redis, keys, config, dispatcher);
  const leases = new LeaseKeeper(g.worker, subscriber, keys.cancelChannel, config.LEASE_MS, config.HEARTBEAT_MS, log);
  await leases.start();
  const counter = countOn(redis);

  const snap = async (): Promise<Snapshot> => ({ roundTrips: counter.roundTrips, server: await totalCommands(admin) });
  const totals: Record<string, Snapshot> = {};
  // Redis counts a command once it has run, so a snapshot's INFO is counted by the next
  // snapshot's: every difference of two snapshots holds one INFO, left out here.
  const add = (phase: string, from: Snapshot, to: Snapshot) => {
    const t = (totals[phase] ??= { roundTrips: 0, server: 0 });
    t.roundTrips += to.roundTrips - from.roundTrips;
    t.server += to.server - from.server - 1;
  };

  let marks: Snapshot[] = [];
  let gate: Promise<void> | undefined;
  const agent = defineAgent({
    name: 'bench-phases',
    async run(ctx: RunContext) {
      marks.push(await snap());
      if (gate) {
        await gate;
        return 'held';
      }
      await ctx.step('lookup', () => 42);
      marks.push(await snap());
      await ctx.tool('send', { to: 'x' }, () => 'sent', { idempotent: false });
      marks.push(await snap());
      return 'done';
    },
  });
  const executor = new RunExecutor({
    redis, keys, config, transitions: g.worker, flow: g.flow, leases, agents: new Map([[agent.name, agent]]), workerId: 'bench-worker', log,
    artifacts: new RedisArtifactStore(redis, keys, g.api, config),
  });
  const submit = async (i: number) =>
    (await door.submit({ scope: 'bench', sessionId: `s${i}`, input: { content: 'hi' }, runtime, agent: agent.name })).run.id;

  try {
    // Warm up: the first call on a fresh server loads the transitions library (Function not found, FUNCTION LOAD, the call again).
    await executor.execute({ scope: 'bench', runId: await submit(-1), dispatch: 1 });

    for (let i = 0; i < SAMPLES; i++) {
      const runId = await submit(i);
      marks = [];
      const before = await snap();
      await executor.execute({ scope: 'bench', runId, dispatch: 1 });
      const after = await snap();
      add('claim', before, marks[0]);
      add('step', marks[0], marks[1]);
      add('step (non-idempotent)', marks[1], marks[2]);
      add('finish', marks[2], after);
    }

    // Heartbeat: HELD runs waiting inside their agents, one beat for all of them.
    let open!: () => void;
    gate = new Promise<void>((r) => { open = r; });
    const held = await Promise.all(Array.from({ length: HELD }, (_, i) => submit(1000 + i)));
    marks = [];
    const running = held.map((runId) => executor.execute({ scope: 'bench', runId, dispatch: 1 }));
    while (marks.length < HELD) await new Promise((r) => setTimeout(r, 5));
    const before = await snap();
    await leases.beat();
    add('heartbeat', before, await snap());
    open();
    await Promise.all(running);
  } finally {
    await leases.stop();
    await setupDispatcher.queue(runtime, agent.name).obliterate({ force: true }).catch(() => {});
    await Promise.all([setupDispatcher.close(), dispatcher.close()]);
    await deleteByPrefix(admin, prefix);
    await Promise.all([admin.quit(), setup.quit(), redis.quit(), subscriber.quit()]);
  }

  const per = (phase: string, n: number): TransitionCost => ({
    roundTrips: round(totals[phase].roundTrips / n), commands: round(totals[phase].server / n),
  });
  return {
    claim: per('claim', SAMPLES),
    step: per('step', SAMPLES),
    stepNonIdempotent: per('step (non-idempotent)', SAMPLES),
    finish: per('finish', SAMPLES),
    heartbeat: { ...per('heartbeat', 1), held: HELD },
  };
}

/** Prints the costs; `goals` are the command budgets some transitions are held to. */
export function printTransitions(t: TransitionCosts, goals: Partial<Record<keyof TransitionCosts, number>> = {}): void {
  const row = (c: TransitionCost, goal?: number, perRun = 1) => ({
    'round trips': c.roundTrips,
    'Redis commands': round(c.commands / perRun),
    goal: goal === undefined ? '' : `≤ ${goal}`,
  });
  console.log(`\nRedis round trips and commands per transition (average of ${SAMPLES} runs; commands include the scripts' own calls)`);
  printTable('transition', {
    claim: row(t.claim, goals.claim),
    'step (memoized, idempotent)': row(t.step, goals.step),
    'step (non-idempotent)': row(t.stepNonIdempotent, goals.stepNonIdempotent),
    finish: row(t.finish, goals.finish),
    [`heartbeat, per run held (one beat for ${t.heartbeat.held} runs)`]: row(t.heartbeat, goals.heartbeat, t.heartbeat.held),
  });
}

const round = (x: number) => Math.round(x * 10) / 10;

async function main(): Promise<void> {
  await withBenchRedis(async (redisUrl) => printTransitions(await benchTransitions(redisUrl)));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
