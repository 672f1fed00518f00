import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';
import type { ApiHandle } from '../../src/api/server.ts';
import { startLocalRedis } from '../../src/cli/local-redis.ts';
import type { Agent } from '../../src/lib/sdk/agent.ts';
import { ApiKeyStore, type ScopeRole } from '../../src/lib/tenancy/api-keys.ts';
import { loadConfig, type Config } from '../../src/lib/config/index.ts';
import { createKeys, type Keys } from '../../src/lib/keys.ts';
import { createLogger } from '../../src/lib/logger.ts';
import { createRedis, waitReady, type Redis } from '../../src/lib/redis/redis.ts';
import type { WorkerHandle } from '../../src/worker/worker.ts';
import { Dispatcher } from '../../src/lib/engine/dispatcher.ts';
import { gateways, type Gateways } from '../../src/lib/transitions/gateways.ts';
import { track } from './resources.ts';
import { call, readSse, type JsonResponse } from './http.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The `baton` command of the checkout at `root` (a folder with a trailing slash) run from its src/ through tsx. */
export const launcherIn = (root: string) => `${root}test/helpers/baton-src.mjs`;
/**
 * The `baton` command tests spawn: src/ as the global setup compiled it for this run
 * (compiled-sources.ts: no tsx at each start), else, outside a test run, src/ through tsx.
 * Neither needs a build (bin/baton.js runs dist/).
 */
export const BIN = compiledLauncher() ?? launcherIn(ROOT);

function compiledLauncher(): string | undefined {
  try {
    return inject('batonLauncher');
  } catch {
    return undefined; // imported outside vitest (a benchmark)
  }
}

/** Settings that make tests fast: short leases and sweeps, no log noise. */
export const FAST: Record<string, string> = {
  LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
  PORT: '0',
  METRICS_PORT: '0',
  LEASE_MS: '2000',
  SWEEP_INTERVAL_MS: '500',
  DISPATCH_GRACE_MS: '1500',
  RETRY_BASE_MS: '100',
  RETRY_MAX_MS: '1000',
  SHUTDOWN_GRACE_MS: '2000',
  EMIT_FLUSH_MS: '5',
};

export interface Harness {
  redisUrl: string;
  prefix: string;
  runtime: string;
  env: Record<string, string>;
  config: Config;
  keys: Keys;
  /** A plain connection for assertions (file scoped). */
  redis: Redis;
  configWith(overrides?: Record<string, string>): Config;
  startApi(overrides?: Record<string, string>): Promise<ApiHandle>;
  startWorker(opts?: { env?: Record<string, string>; agents?: Agent[] }): Promise<WorkerHandle>;
  /**
   * Starts `baton <command>` as a child process; resolves when it prints its ready line.
   * `checkout`: the folder of another checkout (an older release's) to run it from, in that
   * folder, with this file's environment all the same.
   */
  spawn(
    command: 'api' | 'worker', opts?: { env?: Record<string, string>; agents?: string[]; args?: string[]; checkout?: string },
  ): Promise<Child>;
  /** An API key for `scope` with `role` (created once per file, cached). */
  key(scope: string, role?: ScopeRole): Promise<string>;
  /** An operator key, bound to no scope (created once per file, cached). */
  operatorKey(): Promise<string>;
  /** HTTP helpers bound to `/v1/scopes/<scope>` on `baseUrl`, authenticated with key(scope, role). */
  client(baseUrl: string, scope: string, role?: ScopeRole): Promise<ScopeClient>;
  /** Every Redis key of this file's prefix but those processes rewrite on their own timers. */
  allKeys(): Promise<string[]>;
  /** The transitions' gateways on this file's connection, for tests that drive scripts directly. */
  gateways(overrides?: Record<string, string>): Gateways;
}

export interface ScopeClient {
  scope: string;
  key: string;
  headers: Record<string, string>;
  get<T = any>(path: string): Promise<JsonResponse<T>>;
  post<T = any>(path: string, body?: unknown, headers?: Record<string, string>): Promise<JsonResponse<T>>;
  del<T = any>(path: string): Promise<JsonResponse<T>>;
  sse(path: string, opts?: Parameters<typeof readSse>[1]): ReturnType<typeof readSse>;
  /** Submits `{ sessionId, input: { content }, runtime: <this file's runtime>, ...extra }`. */
  submit<T = any>(sessionId: string, content: string, extra?: Record<string, unknown>): Promise<JsonResponse<T>>;
  /** Polls the run until its status is one of `statuses`. */
  waitStatus(runId: string, statuses: string[], timeoutMs?: number): Promise<any>;
}

export interface Child {
  process: ChildProcess;
  output(): string;
  /** For `api`: the URL it listens on. */
  url?: string;
  kill(signal?: NodeJS.Signals): Promise<void>;
  close(): Promise<void>;
}

/**
 * A redis-server of the file's own (no persistence), stopped and its folder removed when the
 * file ends: its URL, for useHarness({ REDIS_URL }). For a file that SCANs its key space on
 * every request (a snapshot that proves a refusal wrote nothing): on the run's shared Redis
 * each walk also passes every other running file's keys, and holds that Redis, which every
 * file waits on, while it does. Also for a file that counts Redis's own statistics.
 */
export async function ownRedis(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-own-redis-'));
  const redis = await startLocalRedis(dir, ['--appendonly', 'no']);
  track(redis, async () => {
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return redis.url;
}

/**
 * Per test file: its own key prefix and runtime (so files run in parallel against one
 * Redis without seeing each other), and helpers that start real API/worker processes.
 */
export async function useHarness(overrides: Record<string, string> = {}): Promise<Harness> {
  // A file may bring its own Redis (a cluster, a redis-server it kills) through REDIS_URL.
  const redisUrl = overrides.REDIS_URL ?? inject('redisUrl');
  const prefix = `t${randomBytes(5).toString('hex')}`;
  const runtime = `rt-${prefix}`;
  const env = { ...FAST, REDIS_URL: redisUrl, BATON_KEY_PREFIX: prefix, RUNTIME: runtime, ...overrides };
  const configWith = (o: Record<string, string> = {}) => loadConfig({ ...env, ...o });
  const config = configWith();
  const log = createLogger(config.LOG_LEVEL);
  const redis = createRedis({ url: redisUrl, name: 'test' });
  track(redis, () => redis.quit());
  await waitReady(redis);
  // Closed before the connection, after what the file started: the file's keys go when it ends,
  // so the run's one Redis holds the running files' keys only, and each SCAN a file makes (its
  // allKeys, a fuzz property's snapshot of its key space per request) walks those, not the
  // keys of every file run before it (bulk and listing files leave tens of thousands).
  track(redis, () => dropKeys(redis, prefix));

  const apiKeys = new ApiKeyStore(redis, createKeys(prefix));
  const keyCache = new Map<string, Promise<string>>();
  const key = (scope: string, role: ScopeRole = 'admin') => {
    const k = `${scope}:${role}`;
    if (!keyCache.has(k)) keyCache.set(k, apiKeys.create(scope, role).then((r) => r.key));
    return keyCache.get(k)!;
  };
  let operator: Promise<string> | undefined;

  return {
    redisUrl, prefix, runtime, env, config, keys: createKeys(prefix), redis,
    configWith,
    key,
    operatorKey: () => (operator ??= apiKeys.createOperator().then((r) => r.key)),
    async client(baseUrl, scope, role = 'admin') {
      const k = await key(scope, role);
      const headers = { authorization: `Bearer ${k}` };
      const base = `/v1/scopes/${scope}`;
      const c: ScopeClient = {
        scope, key: k, headers,
        get: (path) => call(baseUrl, 'GET', base + path, undefined, headers),
        post: (path, body, extra = {}) => call(baseUrl, 'POST', base + path, body, { ...headers, ...extra }),
        del: (path) => call(baseUrl, 'DELETE', base + path, undefined, headers),
        sse: (path, opts = {}) => readSse(baseUrl + base + path, { ...opts, headers: { ...headers, ...opts.headers } }),
        submit: (sessionId, content, extra = {}) =>
          call(baseUrl, 'POST', `${base}/runs`, { sessionId, input: { content }, runtime, ...extra }, headers),
        async waitStatus(runId, statuses, timeoutMs = 20_000) {
          let last: any;
          return waitFor(async () => {
            last = (await c.get(`/runs/${runId}`)).body;
            return statuses.includes(last?.status) ? last : undefined;
          }, timeoutMs, `run ${runId} to reach ${statuses.join('|')}`).catch((err) => {
            throw new Error(`${(err as Error).message}; last: ${JSON.stringify(last)}`);
          });
        },
      };
      return c;
    },
    // The API's and the worker's modules are imported by the files that start one in-process:
    // a file whose processes are all children does not load them (a second of CPU per file).
    async startApi(o = {}) {
      const { startApi } = await import('../../src/api/server.ts');
      const api = await startApi({ config: configWith(o), redisUrl, log });
      return track(api, () => api.close());
    },
    async startWorker(opts = {}) {
      const [{ builtinAgents }, { startWorker }] = await Promise.all([
        import('../../src/worker/agents-loader.ts'), import('../../src/worker/worker.ts'),
      ]);
      const agents = new Map<string, Agent>([...builtinAgents(configWith(opts.env)), ...(opts.agents ?? [])].map((a) => [a.name, a]));
      const w = await startWorker({ config: configWith(opts.env), redisUrl, log, agents });
      return track(w, () => w.close());
    },
    async spawn(command, opts = {}) {
      const bin = opts.checkout ? launcherIn(opts.checkout) : BIN;
      const args = [bin, command, ...(opts.agents ?? []).flatMap((p) => ['--agents', p]), ...(opts.args ?? [])];
      const child = spawn(process.execPath, args, {
        // In its own folder: tsx reads that checkout's tsconfig.json, relative paths resolve there.
        cwd: opts.checkout,
        env: { ...process.env, ...env, ...opts.env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout!.on('data', (b) => { out += b; });
      child.stderr!.on('data', (b) => { out += b; });
      const ready = command === 'api' ? /listening on (http:\/\/\S+)/ : /serving runtime/;
      const match = await new Promise<RegExpMatchArray>((resolve, reject) => {
        // Generous: a child loads a few hundred modules, which takes long on a machine busy with
        // other test files. One that never got ready is killed, not left behind.
        const timer = setTimeout(() => {
          child.kill('SIGKILL');
          reject(new Error(`baton ${command} did not start within 45 s:\n${out}`));
        }, 45_000);
        const check = () => {
          const m = ready.exec(out);
          if (m) { clearTimeout(timer); resolve(m); }
        };
        child.stdout!.on('data', check);
        child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`baton ${command} exited ${code}:\n${out}`)); });
      });
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      const kill = async (signal: NodeJS.Signals = 'SIGTERM') => {
        if (child.exitCode === null && child.signalCode === null) child.kill(signal);
        await exited;
      };
      const handle: Child = {
        process: child,
        output: () => out,
        url: command === 'api' ? match[1] : undefined,
        kill,
        close: () => kill('SIGKILL'),
      };
      return track(handle, handle.close);
    },
    gateways(o = {}) {
      const dispatcher = new Dispatcher(redis, createKeys(prefix));
      track(dispatcher, () => dispatcher.close());
      return gateways(redis, createKeys(prefix), configWith(o), dispatcher);
    },
    async allKeys() {
      // The fair share (and its lock) is rewritten by every process's timer, whatever a request did.
      const { fairShare } = createKeys(prefix);
      const background = new Set([fairShare, `${fairShare}:lock`]);
      const found: string[] = [];
      let cursor = '0';
      do {
        const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', SCAN_COUNT);
        cursor = next;
        found.push(...batch.filter((k) => !background.has(k)));
      } while (cursor !== '0');
      return found;
    },
  };
}

/** Keys a SCAN step looks at: a few milliseconds of Redis's time per step, few round trips per walk. */
const SCAN_COUNT = 10_000;

/** Deletes every key under `prefix` (a file's), if its Redis is still there; bounded to 10 s. */
async function dropKeys(redis: Redis, prefix: string): Promise<void> {
  if (redis.status !== 'ready') return; // a file that stopped its own Redis
  const drop = async () => {
    let cursor = '0';
    do {
      const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', SCAN_COUNT);
      cursor = next;
      if (batch.length) await redis.unlink(...batch);
    } while (cursor !== '0');
  };
  let timer: NodeJS.Timeout | undefined;
  // Best effort: a key left behind costs a later SCAN a step, never a wrong result.
  const bound = new Promise<void>((r) => { timer = setTimeout(r, 10_000); });
  await Promise.race([drop().catch(() => {}), bound]).finally(() => clearTimeout(timer));
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor<T>(fn: () => Promise<T> | T, timeoutMs = 15_000, what = 'condition'): Promise<NonNullable<T>> {
  const until = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < until) {
    last = await fn();
    if (last) return last as NonNullable<T>;
    await sleep(50);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}
