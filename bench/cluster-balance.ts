import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { BatonClient } from '../src/lib/client/client.ts';
import { createKeys } from '../src/lib/keys.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { primaryPortOf, startCluster } from '../test/helpers/cluster.ts';
import { allAtOnceEnv, spawnBaton } from './processes.ts';
import { redisCpuSeconds, totalCommands, withBenchRedis } from './redis-stats.ts';
import { readStreamerRuns } from './streams.ts';
import { num, printTable } from './table.ts';

/**
 * Issue 46's balance figure: how a tenant's streaming runs spread over the primaries of a
 * Redis Cluster. For each number of primaries in BENCH_CLUSTER_PRIMARIES (1,3,6; 1 is a plain
 * redis-server, the bench's own or REDIS_URL's, as `redis-cli --cluster create` needs three)
 * and each number of scopes in BENCH_CLUSTER_SCOPES (1) and of queue partitions in
 * BENCH_CLUSTER_PARTITIONS (1; the worker's QUEUE_PARTITIONS) and each LIVE_PUBSUB in
 * BENCH_CLUSTER_PUBSUB (classic; classic,sharded compares them), BENCH_CLUSTER_RUNS runs (300), each
 * in a session of its own and spread round-robin over the scopes, stream BENCH_CLUSTER_TOKENS
 * tokens (100) one every 20 ms through a `baton api` and a `baton worker` process, read over
 * SSE here. Printed per row: each
 * node's Redis CPU and commands over the whole lifecycle (INFO cpu and commandstats deltas), the
 * balance (the busiest node's CPU over the idlest's), and the streams at 50 tokens/s the fleet
 * could carry before its busiest node's core is full (tokens streamed ÷ that node's CPU
 * seconds ÷ 50). A scope's keys share one hash slot and a runtime's queues another, so today one
 * scope's work lands on at most two nodes whatever the cluster's size.
 *   node --import tsx bench/cluster-balance.ts
 */

function list(name: string, fallback: number[]): number[] {
  const raw = process.env[name];
  const out = raw ? raw.split(',').map((s) => Number(s.trim())) : fallback;
  if (out.length === 0 || out.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`${name}: whole numbers ≥ 1, comma-separated, expected, got "${raw}"`);
  return out;
}

const PRIMARIES = list('BENCH_CLUSTER_PRIMARIES', [1, 3, 6]);
const SCOPES = list('BENCH_CLUSTER_SCOPES', [1]);
const PARTITIONS = list('BENCH_CLUSTER_PARTITIONS', [1]);
const PUBSUB = (process.env.BENCH_CLUSTER_PUBSUB ?? 'classic').split(',').map((s) => s.trim());
if (PUBSUB.some((m) => m !== 'classic' && m !== 'sharded')) throw new Error(`BENCH_CLUSTER_PUBSUB: classic and/or sharded, comma-separated, got "${process.env.BENCH_CLUSTER_PUBSUB}"`);
const [RUNS] = list('BENCH_CLUSTER_RUNS', [300]);
const [TOKENS] = list('BENCH_CLUSTER_TOKENS', [100]);
const TOKEN_MS = 20;
const AGENTS = fileURLToPath(new URL('./bench-agents.ts', import.meta.url));

interface Node { url: string; redis: Redis }
interface Row {
  primaries: number; scopes: number; partitions: number; pubsub: string;
  cpu: number[]; commands: number[]; roles: string[]; tokens: number; seconds: number;
}

/** Runs `fn` with the URL Baton is given and each primary's own URL. */
async function withRedis(primaries: number, fn: (url: string, nodes: string[]) => Promise<void>): Promise<void> {
  if (primaries === 1) return withBenchRedis((url) => fn(url, [url]));
  if (primaries < 3) throw new Error('BENCH_CLUSTER_PRIMARIES: 1 (a plain redis-server) or 3 and more');
  const cluster = await startCluster(primaries);
  try {
    await fn(cluster.url, cluster.ports.map((p) => `redis://127.0.0.1:${p}`));
  } finally {
    await cluster.stop();
  }
}

/** What each node holds of the fleet's keys: the scopes' slots and the runtime's queues. */
async function roles(nodes: Node[], prefix: string, scopes: string[], partitions: number): Promise<string[]> {
  const keys = createKeys(prefix);
  const owner = async (key: string): Promise<number> => {
    if (nodes.length === 1) return 0;
    const port = await primaryPortOf(nodes[0].redis, key);
    return nodes.findIndex((n) => Number(new URL(n.url).port) === port);
  };
  const out = nodes.map(() => [] as string[]);
  for (const s of scopes) out[await owner(keys.scope(s).meta)].push(`scope ${s}`);
  for (let p = 0; p < partitions; p++) out[await owner(`${keys.queuePrefix('bench', p)}:x`)].push(partitions === 1 ? 'queue' : `queue ${p}`);
  return out.map((r) => r.join(', ') || '—');
}

async function measure(primaries: number, scopeCount: number, partitions: number, pubsub: string): Promise<Row> {
  let row!: Row;
  await withRedis(primaries, async (url, nodeUrls) => {
    const nodes = nodeUrls.map((u) => ({ url: u, redis: new Redis(u) }));
    const prefix = `bcl${randomBytes(4).toString('hex')}`;
    const env = {
      ...allAtOnceEnv(url, prefix, RUNS, Math.ceil(RUNS / scopeCount)), QUEUE_PARTITIONS: String(partitions), LIVE_PUBSUB: pubsub,
    };
    const [api, worker] = await Promise.all([spawnBaton('api', env), spawnBaton('worker', env, [AGENTS])]);
    const admin = createRedis({ url, name: 'bench-cluster-admin' });
    try {
      const scopes = Array.from({ length: scopeCount }, (_, i) => (scopeCount === 1 ? 'tenant' : `tenant${i}`));
      const store = new ApiKeyStore(admin, createKeys(prefix));
      const clients = await Promise.all(scopes.map(async (scope) =>
        new BatonClient({ url: api.url!, apiKey: (await store.create(scope, 'client')).key, scope })));
      const before = await Promise.all(nodes.map(async (n) => [await redisCpuSeconds(n.redis) ?? NaN, await totalCommands(n.redis)]));
      const started = Date.now();
      await readStreamerRuns((i) => clients[i % clients.length], {
        runs: RUNS, tag: `cl-${randomBytes(3).toString('hex')}`, tokens: TOKENS,
        // Spread over one token interval, as independent model streams are.
        metadata: (i) => ({ mode: 'latency', tokens: TOKENS, intervalMs: TOKEN_MS, startDelayMs: Math.floor((i * TOKEN_MS) / RUNS) }),
      });
      const seconds = (Date.now() - started) / 1000;
      const after = await Promise.all(nodes.map(async (n) => [await redisCpuSeconds(n.redis) ?? NaN, await totalCommands(n.redis)]));
      row = {
        primaries, scopes: scopeCount, partitions, pubsub, tokens: RUNS * TOKENS, seconds,
        cpu: after.map((a, i) => a[0] - before[i][0]),
        commands: after.map((a, i) => a[1] - before[i][1]),
        roles: await roles(nodes, prefix, scopes, partitions),
      };
    } finally {
      await Promise.all([api.kill(), worker.kill()]);
      await admin.quit();
      for (const n of nodes) n.redis.disconnect();
    }
  });
  return row;
}

/** A row's settings other than the defaults, for its labels: its queue partitions and sharded pub/sub. */
function settings(r: Row, partitionsWord: string): string {
  return `${r.partitions > 1 ? `, ${r.partitions} ${partitionsWord}` : ''}${r.pubsub === 'sharded' ? ', sharded pub/sub' : ''}`;
}

function print(rows: Row[]): void {
  console.log(`one tenant over a Redis Cluster: ${RUNS} runs in ${RUNS} sessions × ${TOKENS} tokens, one every ${TOKEN_MS} ms, API and worker processes, readers here`);
  for (const r of rows) {
    const label = `${r.primaries} primar${r.primaries === 1 ? 'y' : 'ies'}, ${r.scopes} scope${r.scopes === 1 ? '' : 's'}${settings(r, 'queue partitions')}`;
    printTable(`node (${label})`, Object.fromEntries(r.cpu.map((cpu, i) => [`node ${i + 1}`, {
      'Redis CPU ms': num(cpu * 1000, 0), 'share of CPU': `${num((100 * cpu) / r.cpu.reduce((a, b) => a + b, 0), 0)} %`,
      commands: String(r.commands[i]), holds: r.roles[i],
    }])));
  }
  printTable('balance and capacity', Object.fromEntries(rows.map((r) => {
    const busiest = Math.max(...r.cpu);
    return [`${r.primaries} primaries, ${r.scopes} scope(s)${settings(r, 'partitions')}`, {
      'CPU max / min': r.cpu.length > 1 ? `${num(busiest / Math.min(...r.cpu), 1)}×` : '—',
      'commands max / min': r.commands.length > 1 ? `${num(Math.max(...r.commands) / Math.min(...r.commands), 1)}×` : '—',
      'streams at 50 tok/s, busiest node\'s core': num(r.tokens / busiest / (1000 / TOKEN_MS), 0),
      // Each run streams for TOKENS × TOKEN_MS of it: the lifecycle's pace, not a throughput ceiling.
      'runs/s': num(RUNS / r.seconds, 1),
    }];
  })));
}

const rows: Row[] = [];
for (const p of PRIMARIES) for (const s of SCOPES) for (const q of PARTITIONS) for (const m of PUBSUB) rows.push(await measure(p, s, q, m));
print(rows);
process.exit(0);
