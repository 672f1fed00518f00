/**
 * What REDIS_MIN_REPLICAS_ACK=1 costs: the HTTP end-to-end row (API and worker in this
 * process, echo agent, 50 submits in flight) against a primary with one replica, acknowledged
 * by the primary alone (0) and by the replica too (1), each measured twice in turn. The pair
 * runs on its own two redis-servers (append-only on, as `baton start`'s), whatever REDIS_URL
 * says, since the figure is about replication.
 *
 *   node --import tsx bench/replica-acks.ts
 *
 * Knobs: BENCH_ACK_RUNS (1500), BENCH_ACK_WARMUP (300).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startLocalRedis } from '../src/cli/local-redis.ts';
import { benchBaton, type Throughput } from './e2e.ts';
import { percentileOf } from './redis-stats.ts';
import { num, printTable, ratio } from './table.ts';

const RUNS = Number(process.env.BENCH_ACK_RUNS ?? 1500);
const WARMUP = Number(process.env.BENCH_ACK_WARMUP ?? 300);
const ROUNDS = 2;

interface AckRow { throughput: Throughput[]; p50Ms: number; p99Ms: number }
export interface ReplicaAcksBench { byAcks: Map<number, AckRow> }

export async function benchReplicaAcks(): Promise<ReplicaAcksBench> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-bench-acks-'));
  const primary = await startLocalRedis(join(dir, 'primary'));
  const replica = await startLocalRedis(join(dir, 'replica'), ['--replicaof', '127.0.0.1', String(primary.port)]);
  try {
    await synced(replica.url);
    const samples = new Map<number, { throughput: Throughput[]; latencies: number[] }>();
    for (const acks of [0, 1]) samples.set(acks, { throughput: [], latencies: [] });
    for (let round = 0; round < ROUNDS; round++) {
      for (const acks of [0, 1]) {
        const latencies: number[] = [];
        const t = await benchBaton(primary.url, {
          runs: RUNS, warmup: WARMUP, concurrency: 50, viaHttp: true, env: { REDIS_MIN_REPLICAS_ACK: String(acks) }, latencies,
        });
        samples.get(acks)!.throughput.push(t);
        // The measured submits are the last ones answered.
        samples.get(acks)!.latencies.push(...latencies.slice(-RUNS));
      }
    }
    return {
      byAcks: new Map([...samples].map(([acks, s]) => [acks, {
        throughput: s.throughput, p50Ms: percentileOf(s.latencies, 50), p99Ms: percentileOf(s.latencies, 99),
      }])),
    };
  } finally {
    await replica.stop();
    await primary.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function synced(url: string): Promise<void> {
  const r = new Redis(url);
  try {
    for (let i = 0; i < 200; i++) {
      if (/master_link_status:up/.test(await r.info('replication'))) return;
      await new Promise((res) => setTimeout(res, 50));
    }
    throw new Error('the replica did not sync with its primary within 10 s');
  } finally {
    r.disconnect();
  }
}

export function printReplicaAcks(r: ReplicaAcksBench): void {
  console.log(
    `\nreplica-acknowledged writes: HTTP end to end (API and worker in this process, echo agent, 50 submits in flight), ${RUNS} runs ` +
    `after ${WARMUP}, a primary with one replica on this machine; ${ROUNDS} passes of each, in turn`,
  );
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const perSec = (row: AckRow) => mean(row.throughput.map((t) => t.runsPerSec));
  const none = r.byAcks.get(0)!;
  const rows: Record<string, Record<string, string>> = {};
  for (const [acks, row] of r.byAcks) {
    rows[`REDIS_MIN_REPLICAS_ACK=${acks}`] = {
      'runs/s': num(perSec(row), 0),
      'by pass': row.throughput.map((t) => num(t.runsPerSec, 0)).join(', '),
      'vs 0': ratio(perSec(row), perSec(none)),
      'submit → 202 p50 / p99 ms (50 in flight)': `${num(row.p50Ms, 2)} / ${num(row.p99Ms, 2)}`,
      'p99 vs 0': ratio(row.p99Ms, none.p99Ms),
    };
  }
  printTable('setting', rows);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printReplicaAcks(await benchReplicaAcks());
}
