import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../../src/cli/local-redis.ts';

export interface LocalCluster {
  url: string;
  /** Every node's port, the primaries' first as created (replicas follow, with `replicas`). */
  ports: number[];
  /** SIGKILLs the node on `port`. */
  kill(port: number): Promise<void>;
  /** The port of the primary that serves `key`'s slot now, asked of the node on `askPort`. */
  primaryOf(key: string, askPort: number): Promise<number>;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /** Replicas per primary (0). */
  replicas?: number;
  /** cluster-node-timeout: how long a primary may be unreachable before its replica takes over (15 s, Redis's default). */
  nodeTimeoutMs?: number;
}

/**
 * A Redis Cluster of `masters` primaries (3), each with `replicas` replicas, from plain
 * `redis-server --cluster-enabled yes` processes on free loopback ports (each also needs
 * port+10000 free for the cluster bus).
 */
export async function startCluster(masters = 3, o: ClusterOptions = {}): Promise<LocalCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-cluster-'));
  const ports: number[] = [];
  const replicas = o.replicas ?? 0;
  while (ports.length < masters * (1 + replicas)) {
    const p = await freePort();
    if (p + 10000 < 65536 && !ports.includes(p) && (await portFree(p + 10000))) ports.push(p);
  }
  const procs: ChildProcess[] = ports.map((port) =>
    spawn('redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes',
      '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir,
      '--appendonly', 'no', '--save', '', '--dbfilename', `dump-${port}.rdb`,
      ...(o.nodeTimeoutMs ? ['--cluster-node-timeout', String(o.nodeTimeoutMs)] : []),
    ], { stdio: 'ignore' }),
  );
  const stop = async () => {
    await Promise.all(procs.map((p) => new Promise<void>((r) => {
      if (p.exitCode !== null || p.signalCode !== null) return r();
      p.once('exit', () => r());
      p.kill('SIGKILL');
    })));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const port of ports) await waitPing(port);
    const create = spawnSync('redis-cli', [
      '--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', String(replicas), '--cluster-yes',
    ], { encoding: 'utf8', timeout: 30_000 });
    if (create.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${create.stdout}\n${create.stderr}`);
    for (const port of ports) await waitClusterOk(port);
  } catch (err) {
    await stop();
    throw err;
  }
  const kill = (port: number) => {
    const p = procs[ports.indexOf(port)];
    return new Promise<void>((r) => {
      if (!p || p.exitCode !== null || p.signalCode !== null) return r();
      p.once('exit', () => r());
      p.kill('SIGKILL');
    });
  };
  const primaryOf = async (key: string, askPort: number) => {
    const r = new Redis(askPort, '127.0.0.1');
    try {
      return await primaryPortOf(r, key);
    } finally {
      r.disconnect();
    }
  };
  return { url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, ports, kill, primaryOf, stop };
}

/** The port of the primary that serves `key`'s slot, as the cluster node `node` sees it now. */
export async function primaryPortOf(node: Redis, key: string): Promise<number> {
  const slot = Number(await node.call('CLUSTER', 'KEYSLOT', key));
  const ranges = (await node.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
  const range = ranges.find(([from, to]) => slot >= from && slot <= to);
  if (!range) throw new Error(`no node serves slot ${slot}`);
  return range[2][1];
}

async function portFree(port: number): Promise<boolean> {
  const { createServer } = await import('node:net');
  return new Promise((res) => {
    const s = createServer();
    s.once('error', () => res(false));
    s.listen(port, '127.0.0.1', () => s.close(() => res(true)));
  });
}

async function waitPing(port: number): Promise<void> {
  const until = Date.now() + 10_000;
  while (Date.now() < until) {
    const r = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    // A server not up yet refuses the connection: connect() rejects, and the event is that too.
    r.on('error', () => {});
    try {
      await r.connect();
      await r.ping();
      return;
    } catch {
      await new Promise((res) => setTimeout(res, 50));
    } finally {
      r.disconnect();
    }
  }
  throw new Error(`redis-server on ${port} did not start`);
}

async function waitClusterOk(port: number): Promise<void> {
  const r = new Redis(port, '127.0.0.1');
  try {
    const until = Date.now() + 20_000;
    while (Date.now() < until) {
      const info = await r.cluster('INFO');
      if (/cluster_state:ok/.test(String(info))) return;
      await new Promise((res) => setTimeout(res, 100));
    }
    throw new Error(`cluster node ${port} never reached cluster_state:ok`);
  } finally {
    await r.quit();
  }
}
