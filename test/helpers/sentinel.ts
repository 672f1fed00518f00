import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis, type RedisOptions } from 'ioredis';
import { freePort, redisServerProblem } from '../../src/cli/local-redis.ts';

/**
 * A primary, two replicas and three Sentinels, all `redis-server` processes on free loopback
 * ports with their files in one temporary folder: what a Redis deployment with automatic
 * failover is, small enough for a test or the soak (no vitest here, so bench/ imports it too).
 *
 * The Sentinels notice a dead primary after 1 s (`down-after-milliseconds`), two of the
 * three must agree (quorum 2), and one of them promotes a replica: a few seconds from kill to
 * a new primary. Each data node runs from a config file that Sentinel rewrites when it
 * reconfigures the node, so a node started again comes back with what Sentinel last told it;
 * a killed primary comes back saying it is a primary, and Sentinel turns it into a replica of
 * the new one, as in a real deployment.
 */
export interface DataNode {
  /** `node-<port>`: the name in logs and messages. */
  readonly name: string;
  readonly port: number;
  readonly running: boolean;
  /** The node's own log (redis-server's logfile), for a test's failure message. */
  log(): string;
}

export interface SentinelSetup {
  /** `redis[s]+sentinel://[:password@]127.0.0.1:<s1>,…/<masterName>`: what REDIS_URL is set to. */
  url: string;
  /** With `tls`: the certificate authority's file, for NODE_EXTRA_CA_CERTS of a process that connects. */
  caFile?: string;
  masterName: string;
  nodes: readonly DataNode[];
  sentinelPorts: readonly number[];
  /** The primary as the Sentinels name it now (SENTINEL get-master-addr-by-name). */
  primary(): Promise<DataNode>;
  /** SIGKILLs the current primary (no shutdown, no goodbye to clients); returns it. */
  killPrimary(): Promise<DataNode>;
  /**
   * A planned failover (SENTINEL FAILOVER): a replica is promoted while the primary is up,
   * and the old primary becomes its replica later. Returns the old primary.
   * `pauseWritesMs`: first `CLIENT PAUSE <ms> WRITE` on the primary, so it takes no write
   * that the promoted replica would not have (see docs/operations.md).
   */
  switchPrimary(o?: { pauseWritesMs?: number }): Promise<DataNode>;
  /**
   * Waits until every Sentinel names a primary other than `old` and that node says it is a
   * master (REPLICAOF NO ONE has run): the failover is done. Returns the new primary.
   */
  waitForFailover(old: DataNode, timeoutMs?: number): Promise<DataNode>;
  /**
   * Starts a killed node again (same port, same files) and waits until it is a replica of
   * the current primary with its link up: Sentinel has reconfigured it and it has synced.
   */
  restart(node: DataNode, timeoutMs?: number): Promise<void>;
  /**
   * Waits until every running node but the primary is its replica with the link up. After a
   * planned switch the old primary is still a primary until Sentinel turns it (a failover
   * timeout, then its next look at the node: up to about 13 s here); a failover started before
   * that may promote it, with none of what the current primary took since.
   */
  waitSettled(timeoutMs?: number): Promise<void>;
  /**
   * Waits until no client named `<prefix>…` is connected to `node` (after a planned switch:
   * Baton's connections have left the old primary, so no later command of theirs lands there).
   */
  waitForClientsToLeave(node: DataNode, prefix: string, timeoutMs?: number): Promise<void>;
  /**
   * Waits until the Sentinel that switchPrimary asks sees a replica it can promote (it reads
   * replicas' INFO every 10 s, so right after a switch it may see none, and refuse NOGOODSLAVE).
   */
  waitPromotable(timeoutMs?: number): Promise<void>;
  /** What the first Sentinel logged of nodes going down and primaries switching, for a failure message. */
  switches(): string;
  /** Stops every process (SIGKILL) and removes the folder. Idempotent. */
  stop(): Promise<void>;
}

export interface SentinelOptions {
  /** The name Sentinel knows the primary by. Default `baton`. */
  masterName?: string;
  /** `requirepass` (and `masterauth`) on the data nodes; the URL then carries it. */
  password?: string;
  /** `requirepass` on the Sentinels; the URL then carries it as `sentinelPassword`. */
  sentinelPassword?: string;
  /** How long a primary must not answer before a Sentinel thinks it down. Default 1000 ms. */
  downAfterMs?: number;
  /**
   * TLS only, everywhere (clients, replication, Sentinels), with a certificate for 127.0.0.1
   * signed by a certificate authority made here (needs `openssl` on PATH); the URL is `rediss+sentinel://`.
   */
  tls?: boolean;
}

interface Proc { port: number; conf: string; logfile: string; sentinel: boolean; child?: ChildProcess }

export async function startSentinels(o: SentinelOptions = {}): Promise<SentinelSetup> {
  const problem = redisServerProblem();
  if (problem) throw new Error(problem);
  const masterName = o.masterName ?? 'baton';
  const dir = mkdtempSync(join(tmpdir(), 'baton-sentinel-'));
  const ports: number[] = [];
  while (ports.length < 6) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const [primaryPort, ...rest] = ports;
  const dataPorts = [primaryPort, rest[0], rest[1]];
  const sentinelPorts = rest.slice(2);
  const tls = o.tls ? makeCertificates(join(dir, 'tls')) : undefined;
  /** This setup's own connections (to watch and steer it) trust its certificate authority. */
  const tlsOptions = tls ? { ca: readFileSync(tls.ca) } : undefined;
  // With TLS the port is the TLS port and there is no plain one.
  const listen = (port: number) => (tls ? [
    'port 0', `tls-port ${port}`, `tls-cert-file ${quote(tls.cert)}`, `tls-key-file ${quote(tls.key)}`,
    `tls-ca-cert-file ${quote(tls.ca)}`, 'tls-auth-clients no', 'tls-replication yes',
  ] : [`port ${port}`]);

  const data: Proc[] = dataPorts.map((port, i) => {
    const nodeDir = join(dir, `node-${port}`);
    mkdirSync(nodeDir);
    const conf = join(nodeDir, 'redis.conf');
    writeFileSync(conf, [
      ...listen(port), 'bind 127.0.0.1', `dir ${quote(nodeDir)}`, `logfile ${quote(join(nodeDir, 'redis.log'))}`,
      'appendonly yes', 'save ""',
      // A replica that rejoins syncs at once, not after the default 5 s wait for others to join it.
      'repl-diskless-sync-delay 0',
      ...(o.password ? [`requirepass ${quote(o.password)}`, `masterauth ${quote(o.password)}`] : []),
      ...(i > 0 ? [`replicaof 127.0.0.1 ${primaryPort}`] : []),
    ].join('\n') + '\n');
    return { port, conf, logfile: join(nodeDir, 'redis.log'), sentinel: false };
  });
  const sentinels: Proc[] = sentinelPorts.map((port) => {
    const sdir = join(dir, `sentinel-${port}`);
    mkdirSync(sdir);
    const conf = join(sdir, 'sentinel.conf');
    writeFileSync(conf, [
      ...listen(port), 'bind 127.0.0.1', `dir ${quote(sdir)}`, `logfile ${quote(join(sdir, 'sentinel.log'))}`,
      ...(o.sentinelPassword ? [`requirepass ${quote(o.sentinelPassword)}`] : []),
      `sentinel monitor ${masterName} 127.0.0.1 ${primaryPort} 2`,
      ...(o.password ? [`sentinel auth-pass ${masterName} ${quote(o.password)}`] : []),
      `sentinel down-after-milliseconds ${masterName} ${o.downAfterMs ?? 1000}`,
      // Also how long before a failover that stalled is tried again (twice this): keep it short.
      `sentinel failover-timeout ${masterName} 3000`,
      `sentinel parallel-syncs ${masterName} 2`,
    ].join('\n') + '\n');
    return { port, conf, logfile: join(sdir, 'sentinel.log'), sentinel: true };
  });

  const launch = async (p: Proc): Promise<void> => {
    const args = p.sentinel ? [p.conf, '--sentinel'] : [p.conf];
    // Its log goes to its logfile; stderr says why a config was refused before there is one.
    const child = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (b) => { stderr = (stderr + b).slice(-4000); });
    p.child = child;
    const exited = () => (child.exitCode !== null || child.signalCode !== null ? `${stderr}${tail(readOrEmpty(p.logfile))}` : undefined);
    await waitAnswers(p.port, { password: p.sentinel ? o.sentinelPassword : o.password, tls: tlsOptions }, exited);
  };
  const kill = async (p: Proc): Promise<void> => {
    const child = p.child;
    p.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  };
  const nodes: DataNode[] = data.map((p) => ({
    name: `node-${p.port}`,
    port: p.port,
    get running() { return p.child !== undefined; },
    log: () => readOrEmpty(p.logfile),
  }));
  const procOf = (node: DataNode) => data.find((p) => p.port === node.port)!;
  const nodeAt = (port: number) => {
    const node = nodes.find((n) => n.port === port);
    if (!node) throw new Error(`the Sentinels name ${port} as the primary, which is none of this setup's nodes`);
    return node;
  };

  const connect = (port: number, password: string | undefined) => new Redis(port, '127.0.0.1', {
    password, tls: tlsOptions, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false,
  });
  /** What one Sentinel answers, on a connection of its own for this one question. */
  const askSentinel = async <T>(port: number, ask: (r: Redis) => Promise<T>): Promise<T> => {
    const r = connect(port, o.sentinelPassword);
    r.on('error', () => {});
    try {
      await r.connect();
      return await ask(r);
    } finally {
      r.disconnect();
    }
  };
  const masterPortSaidBy = (port: number) =>
    askSentinel(port, async (r) => {
      const addr = (await r.call('SENTINEL', 'get-master-addr-by-name', masterName)) as [string, string] | null;
      return addr ? Number(addr[1]) : undefined;
    });
  const replication = async (port: number): Promise<Record<string, string>> => {
    const r = connect(port, o.password);
    r.on('error', () => {});
    try {
      await r.connect();
      return parseInfo(await r.info('replication'));
    } finally {
      r.disconnect();
    }
  };

  const replicates = async (node: DataNode, primary: DataNode) => {
    const info = await replication(node.port).catch(() => undefined);
    return info?.role === 'slave' && Number(info.master_port) === primary.port && info.master_link_status === 'up';
  };

  // A caller that exits without stop() (a failed soak, Ctrl-C) leaves no redis-server behind.
  const killAll = () => { for (const p of [...sentinels, ...data]) p.child?.kill('SIGKILL'); };
  process.once('exit', killAll);
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= (async () => {
    process.removeListener('exit', killAll);
    for (const p of [...sentinels, ...data]) await kill(p);
    rmSync(dir, { recursive: true, force: true });
  })());

  const auth = o.password ? `:${encodeURIComponent(o.password)}@` : '';
  const scheme = tls ? 'rediss+sentinel' : 'redis+sentinel';
  const query = o.sentinelPassword ? `?sentinelPassword=${encodeURIComponent(o.sentinelPassword)}` : '';
  const setup: SentinelSetup = {
    url: `${scheme}://${auth}${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',')}/${masterName}${query}`,
    caFile: tls?.ca,
    masterName,
    nodes,
    sentinelPorts,
    async primary() {
      let lastErr: unknown;
      for (const p of sentinels.filter((s) => s.child)) {
        try {
          const port = await masterPortSaidBy(p.port);
          if (port !== undefined) return nodeAt(port);
        } catch (err) {
          lastErr = err;
        }
      }
      throw new Error(`no Sentinel names a primary for ${masterName}${lastErr ? `: ${(lastErr as Error).message}` : ''}`);
    },
    async killPrimary() {
      const node = await setup.primary();
      await kill(procOf(node));
      return node;
    },
    async switchPrimary({ pauseWritesMs } = {}) {
      const node = await setup.primary();
      await setup.waitPromotable();
      if (pauseWritesMs) {
        const r = connect(node.port, o.password);
        try {
          await r.connect();
          await r.call('CLIENT', 'PAUSE', String(pauseWritesMs), 'WRITE');
        } finally {
          r.disconnect();
        }
      }
      await askSentinel(sentinels[0].port, (r) => r.call('SENTINEL', 'FAILOVER', masterName));
      return node;
    },
    async waitForFailover(old, timeoutMs = 30_000) {
      return until(timeoutMs, `a Sentinel failover away from ${old.name}`, async () => {
        const said = await Promise.all(sentinels.map((s) => masterPortSaidBy(s.port).catch(() => undefined)));
        const port = said[0];
        if (port === undefined || port === old.port || said.some((p) => p !== port)) return undefined;
        const info = await replication(port).catch(() => undefined);
        return info?.role === 'master' ? nodeAt(port) : undefined;
      }, () => sentinels.map((s) => `--- ${s.port}\n${tail(readOrEmpty(s.logfile))}`).join('\n'));
    },
    async restart(node, timeoutMs = 30_000) {
      const p = procOf(node);
      if (p.child) throw new Error(`${node.name} is running`);
      await launch(p);
      await until(timeoutMs, `${node.name} to rejoin as a replica`, async () => {
        const primary = await setup.primary();
        return primary.port !== node.port && (await replicates(node, primary));
      }, () => tail(node.log()));
    },
    async waitForClientsToLeave(node, prefix, timeoutMs = 30_000) {
      await until(timeoutMs, `the ${prefix}* clients to leave ${node.name}`, async () => {
        const r = connect(node.port, o.password);
        r.on('error', () => {});
        try {
          await r.connect();
          const list = (await r.call('CLIENT', 'LIST')) as string;
          return !list.split('\n').some((line) => / name=(\S*)/.exec(line)?.[1].startsWith(prefix));
        } finally {
          r.disconnect();
        }
      });
    },
    // The Sentinel asked picks from the replicas as it last saw them (it reads a replica's INFO
    // every 10 s): after a switch, a replica it still sees with its link down is no candidate,
    // and with none it refuses (NOGOODSLAVE).
    async waitPromotable(timeoutMs = 30_000) {
      await until(timeoutMs, 'the Sentinel to see a replica it can promote', () => askSentinel(sentinels[0].port, async (r) => {
        const replicas = ((await r.call('SENTINEL', 'REPLICAS', masterName)) as string[][]).map(pairs);
        return replicas.some((x) => x.flags === 'slave' && x['master-link-status'] === 'ok' && x['master-link-down-time'] === '0');
      }).catch(() => false));
    },
    switches: () => readOrEmpty(sentinels[0].logfile).split('\n').filter((l) => /[+-](sdown|odown|switch-master|failover-end)\b/.test(l)).join('\n'),
    async waitSettled(timeoutMs = 30_000) {
      await until(timeoutMs, 'every running node to replicate the primary', async () => {
        const primary = await setup.primary();
        const others = nodes.filter((n) => n.running && n.port !== primary.port);
        return (await Promise.all(others.map((n) => replicates(n, primary)))).every(Boolean);
      });
    },
    stop,
  };

  try {
    await launch(data[0]);
    for (const p of data.slice(1)) await launch(p);
    for (const node of nodes.slice(1)) {
      await until(20_000, `${node.name} to sync from the primary`, async () => (await replication(node.port)).master_link_status === 'up');
    }
    for (const p of sentinels) await launch(p);
    // A failover needs Sentinels that know each other (hello messages, every 2 s) and know
    // the replicas (the primary's INFO): until then a dead primary would stay dead.
    for (const p of sentinels) {
      await until(30_000, `Sentinel ${p.port} to see both replicas and the other Sentinels`, () =>
        askSentinel(p.port, async (r) => {
          const m = pairs((await r.call('SENTINEL', 'master', masterName)) as string[]);
          return m['num-slaves'] === '2' && m['num-other-sentinels'] === '2';
        }).catch(() => false));
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return setup;
}

/** Polls `fn` until it gives a truthy value; on timeout the error carries `detail()`. */
async function until<T>(timeoutMs: number, what: string, fn: () => Promise<T>, detail?: () => string): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn().catch(() => undefined);
    if (v) return v as NonNullable<T>;
    await sleep(50);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail ? `\n${detail()}` : ''}`);
}

/** Until the server on `port` answers PING (a data node still loading its files answers LOADING: waited out). */
async function waitAnswers(port: number, auth: Pick<RedisOptions, 'password' | 'tls'>, exited: () => string | undefined): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const why = exited();
    if (why !== undefined) throw new Error(`redis-server on ${port} exited while starting:\n${why}`);
    const r = new Redis(port, '127.0.0.1', { ...auth, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on('error', () => {});
    try {
      await r.connect();
      await r.ping();
      return;
    } catch {
      await sleep(50);
    } finally {
      r.disconnect();
    }
  }
  throw new Error(`redis-server on ${port} did not answer in 30 s`);
}

/** A certificate authority and a certificate for 127.0.0.1 it signed, made with openssl in `dir`. */
function makeCertificates(dir: string): { ca: string; cert: string; key: string } {
  mkdirSync(dir);
  const f = (name: string) => join(dir, name);
  const openssl = (args: string[]) => {
    const r = spawnSync('openssl', args, { encoding: 'utf8' });
    if (r.error || r.status !== 0) throw new Error(`openssl ${args[0]} failed: ${r.error?.message ?? r.stderr}`);
  };
  writeFileSync(f('ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '2', '-subj', '/CN=baton test CA']);
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=127.0.0.1']);
  openssl(['x509', '-req', '-in', f('server.csr'), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-out', f('server.crt'), '-days', '2', '-extfile', f('ext.cnf')]);
  return { ca: f('ca.crt'), cert: f('server.crt'), key: f('server.key') };
}

/** A config file's value in double quotes, as redis.conf reads them (a password may hold spaces). */
const quote = (value: string) => JSON.stringify(value);

function parseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

/** A flat `[k1, v1, k2, v2, …]` reply as an object. */
function pairs(flat: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]] = flat[i + 1];
  return out;
}

function readOrEmpty(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

const tail = (text: string, lines = 30) => text.split('\n').slice(-lines).join('\n');
