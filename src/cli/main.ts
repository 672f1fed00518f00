import { parseArgs } from 'node:util';
import { startApi } from '../api/server.ts';
import { loadAgents } from '../worker/agents-loader.ts';
import { startWorker } from '../worker/worker.ts';
import { ConfigError, loadConfig, type Config } from '../lib/config.ts';
import { createLogger, type Logger } from '../lib/logger.ts';
import { Metrics } from '../lib/ops/metrics.ts';
import { CLIENT_USAGE, describeClientError, runClientCommand } from './client-commands.ts';
import { ensureDevKey, KEYS_USAGE, recordLocalRedisUrl, runKeysCommand } from './keys-command.ts';
import { startLocalRedis } from './local-redis.ts';
import { onShutdown } from './shutdown.ts';

const USAGE = `Usage: baton <command> [options]

Commands:
  start     API + worker in one process (spawns redis-server under .baton/redis when REDIS_URL is unset)
  api       the HTTP API only (needs REDIS_URL)
  worker    a worker for RUNTIME (needs REDIS_URL)
  keys      API keys: create, list, revoke (below)

Options:
  --agents <path>   load agents from a module (repeatable), besides the built-in ones
  -h, --help        this text

Configuration comes from the environment; see README.md.

${CLIENT_USAGE}

${KEYS_USAGE}`;

async function main(argv: string[]): Promise<void> {
  // Client commands parse their own flags and need no Redis configuration.
  if (argv[0] === 'submit' || argv[0] === 'tail') {
    const code = await runClientCommand(argv[0], argv.slice(1)).catch((err: unknown) => {
      const d = describeClientError(err);
      console.error(d.message);
      return d.code;
    });
    process.exit(code);
  }
  // Key commands parse their own flags and talk to Redis directly.
  if (argv[0] === 'keys') process.exit(await runKeysCommand(argv.slice(1), loadConfigOrExit()));
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { agents: { type: 'string', multiple: true }, help: { type: 'boolean', short: 'h' } },
  });
  const command = positionals[0];
  if (values.help || !command) {
    console.log(USAGE);
    return;
  }
  const config = loadConfigOrExit();
  const log = createLogger(config.LOG_LEVEL);
  switch (command) {
    case 'start': return start(config, log, values.agents ?? []);
    case 'api': return api(config, log);
    case 'worker': return worker(config, log, values.agents ?? []);
    default:
      console.error(`unknown command "${command}"\n\n${USAGE}`);
      process.exit(2);
  }
}

function loadConfigOrExit(): Config {
  try {
    return loadConfig();
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

async function start(config: Config, log: Logger, agentPaths: string[]): Promise<void> {
  let redisUrl = config.REDIS_URL;
  let stopRedis: (() => Promise<void>) | undefined;
  if (!redisUrl) {
    const local = await startLocalRedis('.baton/redis');
    redisUrl = local.url;
    // `baton keys` run next to this process finds the spawned Redis through this file.
    const forget = recordLocalRedisUrl(local.url);
    stopRedis = async () => {
      forget();
      await local.stop();
    };
    log.info({ redis: redisUrl, dir: '.baton/redis' }, 'started local redis-server');
  }
  const agents = await loadAgents(agentPaths);
  // One registry for both halves: the API's /metrics and /readyz cover the worker too.
  const metrics = new Metrics({ scopeLabel: config.METRICS_SCOPE_LABEL, labelLimit: config.METRICS_LABEL_LIMIT });
  const w = await startWorker({ config, redisUrl, log, agents, metrics, opsServer: false });
  const a = await startApi({ config, redisUrl, log, metrics, checks: w.checks });
  const devKey = await ensureDevKey(a.redis, config);
  if (devKey) console.log(`development API key (scope "dev", role admin), shown only now:\n  ${devKey}`);
  else console.log('API keys exist already; make one with: baton keys create --scope dev --role admin');
  // The key rides in the fragment, which the browser never sends: the inspector takes it from there.
  console.log(`run inspector: ${a.url}/ui${devKey ? `#key=${devKey}  (opens logged in with the development key)` : ''}`);
  console.log(`baton is up: API ${a.url}  (runtime "${config.RUNTIME}", agents: ${[...agents.keys()].join(', ')})`);
  onShutdown(log, [() => a.close(), () => w.close(), ...(stopRedis ? [stopRedis] : [])]);
}

async function api(config: Config, log: Logger): Promise<void> {
  const a = await startApi({ config, redisUrl: requireRedisUrl(config), log });
  console.log(`baton api listening on ${a.url}`);
  onShutdown(log, [() => a.close()]);
}

async function worker(config: Config, log: Logger, agentPaths: string[]): Promise<void> {
  const agents = await loadAgents(agentPaths);
  const w = await startWorker({ config, redisUrl: requireRedisUrl(config), log, agents });
  console.log(`baton worker ${w.workerId} serving runtime "${w.runtime}" (metrics ${w.opsUrl}/metrics)`);
  onShutdown(log, [() => w.close()]);
}

main(process.argv.slice(2)).catch((err) => {
  console.error((err as Error).message ?? err);
  process.exit(1);
});
