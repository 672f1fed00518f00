import { parseArgs } from 'node:util';
import { startApi } from '../api/server.ts';
import { loadAgents } from '../worker/agents-loader.ts';
import { startWorker } from '../worker/worker.ts';
import { ConfigError, loadConfig, type Config } from '../lib/config.ts';
import { createLogger, type Logger } from '../lib/logger.ts';
import { startLocalRedis } from './local-redis.ts';
import { onShutdown } from './shutdown.ts';

const USAGE = `Usage: baton <command> [options]

Commands:
  start     API + worker in one process (spawns redis-server under .baton/redis when REDIS_URL is unset)
  api       the HTTP API only (needs REDIS_URL)
  worker    a worker for RUNTIME (needs REDIS_URL)

Options:
  --agents <path>   load agents from a module (repeatable), besides the built-in ones
  -h, --help        this text

Configuration comes from the environment; see README.md.`;

async function main(argv: string[]): Promise<void> {
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
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
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
    stopRedis = local.stop;
    log.info({ redis: redisUrl, dir: '.baton/redis' }, 'started local redis-server');
  }
  const agents = await loadAgents(agentPaths);
  const w = await startWorker({ config, redisUrl, log, agents });
  const a = await startApi({ config, redisUrl, log });
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
  console.log(`baton worker ${w.workerId} serving runtime "${w.runtime}"`);
  onShutdown(log, [() => w.close()]);
}

main(process.argv.slice(2)).catch((err) => {
  console.error((err as Error).message ?? err);
  process.exit(1);
});
