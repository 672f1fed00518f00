import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type Config } from '../lib/config/index.ts';
import { createLogger, type Logger } from '../lib/logger.ts';
import type { Resources } from '../lib/process/resources.ts';
import { CLIENT_COMMANDS, CLIENT_USAGE, describeClientError, runClientCommand, type ClientCommand } from './client-commands.ts';
import { INIT_USAGE, runInit } from './init.ts';
import { ensureDevKey, KEYS_USAGE, recordLocalRedisUrl, runKeysCommand, writeDevKeyFile } from './keys-command.ts';
import { lockBatonDir, type BatonDirLock } from './local-redis.ts';
import { superviseLocalRedis } from './redis-supervisor.ts';
import { onShutdown } from './shutdown.ts';
import { startTracing } from './tracing.ts';
import { generationChannel, startWatchedWorkers } from './watch.ts';

const USAGE = `Usage: baton <command> [options]

Commands:
  start     API + worker in one process (spawns redis-server under .baton/redis when REDIS_URL is unset)
  api       the HTTP API only (needs REDIS_URL)
  worker    a worker for one runtime (needs REDIS_URL)
  keys      API keys: create, list, revoke (below)
  init      a new folder for your agents: package.json, agents.mjs, baton-agents installed (below)

Options (each is the same as the environment variable named; the flag wins):
  --agents <path>        start, worker: load agents from a module (repeatable), besides the built-in ones
  --runtime <id>         start, worker: the runtime to serve (RUNTIME, default "default")
  --concurrency <n>      start, worker: runs executed at once (WORKER_CONCURRENCY, default 16)
  --port <n>             start, api: port to listen on, 0 = any free one (PORT, default 3000)
  --host <addr>          start, api: address to bind (HOST, default 127.0.0.1)
  --watch                start: reload the --agents modules (and the files they import) on save;
                         the worker runs in a child process, replaced by a new one on each save
  -h, --help             this text

Everything else is configured through the environment; see docs/configuration.md.

${CLIENT_USAGE}

${KEYS_USAGE}

${INIT_USAGE}`;

/** Flags each server command takes, and the environment variable each one sets. */
const FLAGS = {
  start: ['agents', 'runtime', 'concurrency', 'port', 'host', 'watch'],
  api: ['port', 'host'],
  worker: ['agents', 'runtime', 'concurrency'],
} as const;
const FLAG_ENV = { runtime: 'RUNTIME', concurrency: 'WORKER_CONCURRENCY', port: 'PORT', host: 'HOST' } as const;

type ServerCommand = keyof typeof FLAGS;

function usageError(message: string): never {
  console.error(`${message}\n\n${USAGE}`);
  process.exit(2);
}

async function main(argv: string[]): Promise<void> {
  // Client commands parse their own flags and need no Redis configuration.
  if ((CLIENT_COMMANDS as readonly string[]).includes(argv[0])) {
    const code = await runClientCommand(argv[0] as ClientCommand, argv.slice(1)).catch((err: unknown) => {
      const d = describeClientError(err);
      console.error(d.message);
      return d.code;
    });
    process.exit(code);
  }
  // Init needs neither Redis nor configuration.
  if (argv[0] === 'init') process.exit(runInit(argv.slice(1)));
  // Key commands parse their own flags and talk to Redis directly.
  if (argv[0] === 'keys') process.exit(await runKeysCommand(argv.slice(1), loadConfigOrExit(process.env)));
  const command = argv[0];
  if (command === undefined || command === '-h' || command === '--help' || command === 'help') {
    console.log(USAGE);
    return;
  }
  if (!(command in FLAGS)) usageError(`unknown command "${command}"`);
  const allowed = FLAGS[command as ServerCommand];
  let parsed: ReturnType<typeof parseServerFlags>;
  try {
    parsed = parseServerFlags(argv.slice(1));
  } catch (err) {
    usageError((err as Error).message);
  }
  if (parsed.values.help) {
    console.log(USAGE);
    return;
  }
  if (parsed.positionals.length) usageError(`unexpected argument "${parsed.positionals[0]}"`);
  const env: Record<string, string | undefined> = { ...process.env };
  for (const [flag, value] of Object.entries(parsed.values)) {
    if (flag === 'help' || value === undefined) continue;
    if (!(allowed as readonly string[]).includes(flag)) usageError(`baton ${command} takes no --${flag}`);
    if (flag in FLAG_ENV) env[FLAG_ENV[flag as keyof typeof FLAG_ENV]] = String(value);
  }
  const agentPaths = parsed.values.agents ?? [];
  if (parsed.values.watch && agentPaths.length === 0) usageError('baton start --watch reloads the modules of --agents: name at least one');
  const config = loadConfigOrExit(env);
  switch (command as ServerCommand) {
    case 'start': return start(config, agentPaths, parsed.values.watch ? env : undefined);
    case 'api': return api(config);
    case 'worker': return worker(config, agentPaths);
  }
}

function parseServerFlags(args: string[]) {
  return parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      agents: { type: 'string', multiple: true },
      runtime: { type: 'string' },
      concurrency: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      watch: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

function loadConfigOrExit(env: Record<string, string | undefined>): Config {
  try {
    return loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
}

function requireRedisUrl(config: Config): string {
  if (!config.REDIS_URL) {
    console.error('REDIS_URL is required for this command (baton start spawns a local Redis instead).');
    process.exit(2);
  }
  return config.REDIS_URL;
}

// Each command loads only the half it runs: an API process never loads the worker, its
// agents or their model clients (about 9 MiB of its memory), and a client command neither.
const apiSide = () => import('../api/server.ts');
async function workerSide() {
  const [{ startWorker }, { builtinAgents, loadAgents }, { trackLocalModules, describeLoadError }] = await Promise.all([
    import('../worker/worker.ts'), import('../worker/agents-loader.ts'), import('../worker/local-modules.ts'),
  ]);
  return { startWorker, builtinAgents, loadAgents, trackLocalModules, describeLoadError };
}

/** Where `baton start` without REDIS_URL keeps its redis-server's data, under a lock (local-redis.ts). */
const BATON_DIR = '.baton';
const LOCAL_REDIS_DIR = '.baton/redis';

/**
 * `baton start`: the API and a worker on one composition root. `watchEnv` (--watch): the
 * worker runs in child processes with this environment instead, replaced on each save (watch.ts);
 * this process then loads no agent module.
 */
async function start(config: Config, agentPaths: string[], watchEnv?: Record<string, string | undefined>): Promise<void> {
  const [{ startApi }, { openResources }] = await Promise.all([apiSide(), import('../lib/process/resources.ts')]);
  const log = createLogger(config.LOG_LEVEL);
  // What is open so far, the last opened first: a shutdown closes it in this order (the API
  // drains, then the worker, then the connections, the local redis-server, the lock), and so
  // does a start that fails part-way. A signal during the start closes what is open by then.
  const closers: (() => Promise<void>)[] = [];
  const shutdown = onShutdown(log, closers, config.SHUTDOWN_GRACE_MS, { hangup: !config.REDIS_URL });
  const opened = (close: () => Promise<void>) => {
    if (shutdown.stopping) void close();
    else closers.unshift(close);
  };
  try {
    // Opened first, so closed last: the spans of everything that closes before it are exported.
    const stopTracing = await startTracing('start', process.env, log);
    if (stopTracing) opened(stopTracing);
    const own = config.REDIS_URL ? undefined : await startOwnRedis(log, opened);
    const redisUrl = config.REDIS_URL ?? own!.url;
    const inProcess = watchEnv ? undefined : await loadInProcess(config, agentPaths);
    // One composition root for both halves: one set of connections, one sweeper, one metrics
    // registry (the API's /metrics and /readyz cover the worker too; the worker opens no port).
    // Under --watch the worker processes have their own (/readyz still asks for one serving).
    const resources = await openResources({ config, redisUrl, log, role: 'start' });
    opened(() => resources.close());
    const w = inProcess ? await inProcess(resources) : await startWatchedWorkers({
      agentPaths, env: { ...watchEnv, REDIS_URL: redisUrl }, log,
      registered: async (workerId) => (await resources.registry.liveWorkers(config.RUNTIME)).some((r) => r.workerId === workerId),
    });
    opened(() => w.close());
    const a = await startApi({ resources, checks: w.checks });
    // The API stops taking requests and the worker drains at once; the streams of the runs it
    // finishes meanwhile end with their `end` event, the others are handed to a reconnect.
    opened(() => a.close({ streamsUntil: w.close() }));
    const devKey = await ensureDevKey(a.redis, config);
    // Shown only to a person at a terminal; any other stdout may be a log that others read.
    const show = devKey !== undefined && process.stdout.isTTY === true;
    if (devKey && show) {
      console.log(`development API key (scope "dev", role admin), shown only now:\n  ${devKey}`);
    } else if (devKey) {
      const file = writeDevKeyFile(devKey);
      log.info({ file }, 'development API key written to a file only its owner can read');
      console.log(`development API key (scope "dev", role admin) written to ${file} (readable only by you; stdout is not a terminal)`);
    } else {
      console.log('API keys exist already; make one with: baton keys create --scope dev --role admin');
    }
    // The key rides in the fragment, which the browser never sends: the inspector takes it from there.
    console.log(`run inspector: ${a.url}/ui${show ? `#key=${devKey}  (opens logged in with the development key)` : ''}`);
    console.log(`baton is up: API ${a.url}  (runtime "${config.RUNTIME}", agents: ${w.agents.join(', ')})`);
    // A second start in this folder names this API.
    own?.lock.note({ api: a.url });
  } catch (err) {
    // A signal stopped the start: the shutdown closes what is open and exits.
    if (shutdown.stopping) return new Promise(() => {});
    for (const close of closers.splice(0)) await close().catch(() => {});
    throw new Error(`baton start: ${startFailure(err, config)}`, { cause: err });
  }
}

/**
 * A start without --watch loads its agents into this process (before any connection is
 * opened, so a module that fails to load fails the start at once), and serves them with a
 * worker on the start's composition root.
 */
async function loadInProcess(config: Config, agentPaths: string[]) {
  const { startWorker, builtinAgents, loadAgents } = await workerSide();
  const agents = await loadAgents(agentPaths, builtinAgents(config));
  return async (resources: Resources) => {
    const w = await startWorker({ resources, agents });
    return { agents: [...agents.keys()], checks: w.checks, close: () => w.close() };
  };
}

/** What stopped a start, in one line. */
function startFailure(err: unknown, config: Config): string {
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'EADDRINUSE' && e.syscall === 'listen') {
    return `port ${config.PORT} on ${config.HOST} is in use by another program; choose another with --port (PORT)`;
  }
  return e.message ?? String(err);
}

/**
 * `baton start` without REDIS_URL: takes the `.baton/` lock (or says where the Baton that
 * holds it runs, and exits 1), spawns redis-server on `.baton/redis` in a process group of its
 * own (a terminal's Ctrl-C reaches Baton, which stops it after draining) and starts it again
 * should it die, and notes its URL for `baton keys`.
 */
async function startOwnRedis(log: Logger, opened: (close: () => Promise<void>) => void): Promise<{ url: string; lock: BatonDirLock }> {
  const lock = await lockBatonDir(BATON_DIR, LOCAL_REDIS_DIR);
  if ('heldBy' in lock) {
    const h = lock.heldBy;
    console.error(`a Baton already runs in ${process.cwd()} (pid ${h.pid}): API ${h.api ?? '(starting)'}, Redis ${h.redis ?? '(starting)'}. ` +
      'Stop it first (Ctrl-C where it runs), or start another one in a folder of its own or with REDIS_URL.');
    process.exit(1);
  }
  opened(async () => lock.release());
  // Every write on disk before it is acknowledged: a redis-server killed under `baton start`
  // comes back (redis-supervisor.ts) with everything Baton was told was stored.
  const local = await superviseLocalRedis(LOCAL_REDIS_DIR, ['--appendfsync', 'always'], {
    log, onRestart: (redisPid) => lock.note({ redisPid }),
  });
  opened(async () => {
    // Only a server of its own: one that died and was not started again is not said to be stopped.
    const redisPid = local.pid;
    if (await local.stop()) log.info({ redisPid }, 'local redis-server stopped');
  });
  lock.note({ redis: local.url, redisPid: local.pid });
  // `baton keys` run next to this process finds the spawned Redis through this file.
  const forget = recordLocalRedisUrl(local.url);
  opened(async () => forget());
  log.info({ redis: local.url, dir: LOCAL_REDIS_DIR }, 'started local redis-server');
  return { url: local.url, lock };
}

async function api(config: Config): Promise<void> {
  const log = createLogger(config.LOG_LEVEL);
  const stopTracing = await startTracing('api', process.env, log);
  const { startApi } = await apiSide();
  const a = await startApi({ config, redisUrl: requireRedisUrl(config), log });
  console.log(`baton api listening on ${a.url}`);
  // The SDK last: what the API's drain still traced is exported before the process exits.
  onShutdown(log, [() => a.close(), ...(stopTracing ? [stopTracing] : [])], config.SHUTDOWN_GRACE_MS);
}

/**
 * `baton worker`. Spawned by `baton start --watch` (generationChannel), it reports to that
 * process instead of printing: the local files its agent modules loaded, then that it serves
 * (or why they did not load), and that it drains once told to stop.
 */
async function worker(config: Config, agentPaths: string[]): Promise<void> {
  const channel = generationChannel(process.env);
  const base = createLogger(config.LOG_LEVEL);
  const log = channel ? base.child({ generation: channel.generation }) : base;
  const stopTracing = await startTracing('worker', process.env, log);
  const { startWorker, builtinAgents, loadAgents, trackLocalModules, describeLoadError } = await workerSide();
  const watched = channel && { channel, modules: trackLocalModules(agentPaths) };
  let agents: Awaited<ReturnType<typeof loadAgents>>;
  try {
    agents = await loadAgents(agentPaths, builtinAgents(config));
  } catch (err) {
    if (!watched) throw err;
    const files = await watched.modules.files();
    await watched.channel.send({ kind: 'failed', error: describeLoadError(err, files), modules: files });
    process.exit(1);
  }
  const w = await startWorker({ config, redisUrl: requireRedisUrl(config), log, agents });
  // The SDK last: the spans of the runs handed over at shutdown are exported before the process exits.
  onShutdown(log, [() => {
    const closed = w.close();
    // Said once close() has begun: from here this worker claims nothing (worker.ts).
    void watched?.channel.send({ kind: 'draining' });
    return closed;
  }, ...(stopTracing ? [stopTracing] : [])], config.SHUTDOWN_GRACE_MS);
  if (watched) {
    await watched.channel.send({ kind: 'ready', workerId: w.workerId, agents: [...agents.keys()], modules: await watched.modules.files() });
  } else {
    console.log(`baton worker ${w.workerId} serving runtime "${w.runtime}" (metrics ${w.opsUrl}/metrics)`);
  }
}

main(process.argv.slice(2)).catch((err) => {
  console.error((err as Error).message ?? err);
  process.exit(1);
});
