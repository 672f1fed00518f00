import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { BatonClient } from '../src/lib/client/client.ts';
import { configSchema, loadConfig } from '../src/lib/config/index.ts';
import { createKeys } from '../src/lib/keys.ts';
import { hold } from './bench-agents.ts';
import { spawnBaton } from './processes.ts';

/**
 * Crash recovery with the default settings: a `baton api` and two `baton worker` processes,
 * RUNS runs of an agent that holds them; the worker holding the first run is SIGKILLed, and
 * for each run it held the figure is the time from the kill to the run's `recovered` status
 * event (the entry's id is Redis's clock, on this machine the same as ours). Every setting
 * is left at its default, whatever this shell's environment says: that is the figure a
 * deployment that changes nothing gets. It lasts about LEASE_MS + SWEEP_INTERVAL_MS.
 */
const RUNS = 2;
const AGENTS = fileURLToPath(new URL('./bench-agents.ts', import.meta.url));
/** Far longer than any recovery: the runs must still be held when their worker dies. */
const HOLD_MS = 300_000;
const GIVE_UP_MS = 120_000;

export interface RecoveryBench {
  /** The recovery settings in force, as loadConfig gives them. */
  settings: string;
  /** Seconds from the kill to each held run's `recovered` event. */
  seconds: number[];
}

/** Blank is unset for loadConfig: every variable the bench does not need is blanked, so defaults apply. */
function defaultsEnv(redisUrl: string, prefix: string): Record<string, string> {
  const env: Record<string, string> = Object.fromEntries(Object.keys(configSchema.shape).map((k) => [k, '']));
  return { ...env, REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: 'bench', PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'warn' };
}

export async function benchRecovery(redisUrl: string): Promise<RecoveryBench> {
  const prefix = `brec${randomBytes(4).toString('hex')}`;
  const env = defaultsEnv(redisUrl, prefix);
  const c = loadConfig(env);
  const settings = `LEASE_MS ${c.LEASE_MS}, HEARTBEAT_MS ${c.HEARTBEAT_MS}, SWEEP_INTERVAL_MS ${c.SWEEP_INTERVAL_MS}, DISPATCH_GRACE_MS ${c.DISPATCH_GRACE_MS}`;
  const keys = createKeys(prefix).scope('bench');
  const processes = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env, [AGENTS]), spawnBaton('worker', env, [AGENTS])]);
  const [api, ...workers] = processes;
  const admin = new Redis(redisUrl);
  try {
    const apiKey = (await new ApiKeyStore(admin, createKeys(prefix)).create('bench', 'client')).key;
    const client = new BatonClient({ url: api.url!, apiKey, scope: 'bench' });
    const runs = await Promise.all(Array.from({ length: RUNS }, (_, i) =>
      client.submit({ sessionId: `held-${i}`, input: { content: 'x' }, runtime: 'bench', agent: hold.name, metadata: { holdMs: HOLD_MS } })));
    const owners = await Promise.all(runs.map(async (run) => {
      const until = Date.now() + 30_000;
      for (;;) {
        const [status, owner] = await admin.hmget(keys.run(run.id), 'status', 'leaseOwner');
        if (status === 'running' && owner) return owner;
        if (Date.now() > until) throw new Error(`run ${run.id} did not start (status ${status})`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }));
    const victim = workers.find((w) => w.workerId === owners[0]);
    if (!victim) throw new Error(`run ${runs[0].id} is held by ${owners[0]}, which is none of the bench's workers`);
    const held = runs.filter((_, i) => owners[i] === victim.workerId);
    const killedAt = Date.now();
    await victim.kill();
    const seconds = await Promise.all(held.map(async (run) => {
      const until = killedAt + GIVE_UP_MS;
      for (;;) {
        const rows = await admin.xrange(keys.events(run.id), '-', '+');
        // Entries are written as `type <type> data <json>`.
        const recovered = rows.find(([, f]) => f[1] === 'status' && JSON.parse(f[3]).status === 'recovered');
        if (recovered) return (Number(recovered[0].split('-')[0]) - killedAt) / 1000;
        if (Date.now() > until) throw new Error(`run ${run.id} was not recovered within ${GIVE_UP_MS / 1000} s of the kill`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }));
    return { settings, seconds };
  } finally {
    await admin.quit();
    await Promise.all(processes.map((p) => p.kill()));
  }
}

export function printRecovery(r: RecoveryBench): void {
  console.log(
    `\nworker SIGKILLed → its runs recovered (the \`recovered\` status event), default settings (${r.settings}): ` +
    `${r.seconds.map((s) => `${s.toFixed(1)} s`).join(', ')} for ${r.seconds.length} run${r.seconds.length > 1 ? 's' : ''}`,
  );
}
