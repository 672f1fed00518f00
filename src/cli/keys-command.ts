import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ApiKeyStore, SCOPE_ROLES, type ApiKeyInfo, type ScopeRole } from '../lib/tenancy/api-keys.ts';
import type { Config } from '../lib/config/index.ts';
import { createKeys, isValidId } from '../lib/keys.ts';
import { createRedis, waitReady, type Redis } from '../lib/redis/redis.ts';

/**
 * `baton keys create|list|revoke`: API keys straight in Redis (no API needed), so the first
 * admin key of a deployment can be made before anyone can authenticate. Keys are stored as
 * SHA-256 hashes; `create` is the only time a key is ever shown.
 */

export const KEYS_USAGE = `Key commands (talk to Redis: REDIS_URL, or the Redis of a running \`baton start\`):
  keys create --scope <scope> --role client|admin [--json]   make a key; printed once
  keys create --operator [--json]                             make an operator key (no scope: it sets
                                                              scopes' limits, reads no tenant's data)
  keys list --scope <scope> | --operator [--json]             ids, roles and creation times (never keys)
  keys revoke <id>                                            the key stops working at once`;

/**
 * Where `baton start` puts the development key when its output is not a terminal (a log
 * file, a container's log): an admin key must not land in logs, which many people and
 * systems read. Only its owner can read the file.
 */
export const DEV_KEY_FILE = '.baton/dev-key';

/** Writes the development key to DEV_KEY_FILE, readable by its owner only; returns its absolute path. */
export function writeDevKeyFile(key: string): string {
  mkdirSync(dirname(DEV_KEY_FILE), { recursive: true });
  // The mode applies when the file is made; chmod covers one left by an earlier start.
  writeFileSync(DEV_KEY_FILE, `${key}\n`, { mode: 0o600 });
  chmodSync(DEV_KEY_FILE, 0o600);
  return resolve(DEV_KEY_FILE);
}

/** Where `baton start` notes the URL of the redis-server it spawned, for `baton keys`. */
export const LOCAL_REDIS_URL_FILE = '.baton/redis.url';

export function recordLocalRedisUrl(url: string): () => void {
  mkdirSync(dirname(LOCAL_REDIS_URL_FILE), { recursive: true });
  writeFileSync(LOCAL_REDIS_URL_FILE, `${url}\n`);
  return () => rmSync(LOCAL_REDIS_URL_FILE, { force: true });
}

class UsageError extends Error {}

/** Runs a keys subcommand; returns the exit status. */
export async function runKeysCommand(argv: string[], config: Config): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      scope: { type: 'string' }, role: { type: 'string' }, operator: { type: 'boolean' }, json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [sub, ...rest] = positionals;
  if (values.help || !sub) {
    console.log(KEYS_USAGE);
    return values.help ? 0 : 2;
  }
  try {
    const action = parseAction(sub, rest, values);
    const redis = await connect(config);
    try {
      return await action(new ApiKeyStore(redis, createKeys(config.BATON_KEY_PREFIX)), values.json === true);
    } finally {
      await redis.quit().catch(() => {});
    }
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`${err.message}\n\n${KEYS_USAGE}`);
    return 2;
  }
}

type Action = (store: ApiKeyStore, json: boolean) => Promise<number>;

/** Checks the arguments before anything connects, so a typo never half-runs. */
function parseAction(sub: string, rest: string[], o: { scope?: string; role?: string; operator?: boolean }): Action {
  const scope = () => {
    if (!o.scope || !isValidId(o.scope)) throw new UsageError('--scope <scope> is required: 1-64 of A-Z a-z 0-9 . _ - (first a letter or digit)');
    return o.scope;
  };
  // An operator key belongs to no scope: --operator goes without --scope and --role.
  const operator = () => {
    if (!o.operator) return false;
    if (o.scope !== undefined || o.role !== undefined) throw new UsageError('--operator makes a key bound to no scope: give it without --scope and --role');
    return true;
  };
  switch (sub) {
    case 'create': {
      if (operator()) {
        return async (store, json) => {
          const k = await store.createOperator();
          if (json) console.log(JSON.stringify({ id: k.id, key: k.key, scope: null, role: k.role }));
          else console.log(`${k.key}\n\noperator key ${k.id} (bound to no scope: it sets scopes' limits and reads no scope's runs). `
            + 'It is shown only now: store it safely.');
          return 0;
        };
      }
      const s = scope();
      if (!SCOPE_ROLES.includes(o.role as ScopeRole)) throw new UsageError(`--role must be one of ${SCOPE_ROLES.join(', ')} (an operator key: --operator)`);
      return async (store, json) => {
        const k = await store.create(s, o.role as ScopeRole);
        if (json) console.log(JSON.stringify({ id: k.id, key: k.key, scope: k.scope, role: k.role }));
        else console.log(`${k.key}\n\nkey ${k.id} for scope "${k.scope}" (${k.role}). It is shown only now: store it safely.`);
        return 0;
      };
    }
    case 'list': {
      const operators = operator();
      const s = operators ? undefined : scope();
      return async (store, json) => {
        const list = s === undefined ? await store.listOperators() : await store.list(s);
        if (json) console.log(JSON.stringify(list.map(presentKey)));
        else if (list.length === 0) console.log(s === undefined ? 'no operator keys' : `no keys for scope "${s}"`);
        else for (const k of list.map(presentKey)) console.log(`${k.id}  ${k.role.padEnd(8)}  ${k.createdAt}`);
        return 0;
      };
    }
    case 'revoke': {
      const id = rest[0];
      if (!id || !isValidId(id)) throw new UsageError('keys revoke <id>: the id shown by `keys create` or `keys list`');
      return async (store) => {
        if (await store.revoke(id)) {
          console.log(`revoked ${id}`);
          return 0;
        }
        console.error(`no key with id ${id}`);
        return 1;
      };
    }
    default:
      throw new UsageError(`unknown keys command "${sub}"`);
  }
}

function presentKey(k: ApiKeyInfo) {
  return { id: k.id, scope: k.scope, role: k.role, createdAt: new Date(k.createdAt).toISOString() };
}

async function connect(config: Config): Promise<Redis> {
  let url = config.REDIS_URL;
  if (!url && existsSync(LOCAL_REDIS_URL_FILE)) url = readFileSync(LOCAL_REDIS_URL_FILE, 'utf8').trim();
  if (!url) throw new UsageError('set REDIS_URL, or run this next to a running `baton start`');
  const redis = createRedis({ url, name: 'cli-keys' });
  try {
    await waitReady(redis, 5_000);
  } catch {
    redis.disconnect();
    // The URL may carry a password: name where it came from instead of printing it.
    throw new UsageError(config.REDIS_URL ? 'Redis at REDIS_URL does not answer' : `the Redis noted in ${LOCAL_REDIS_URL_FILE} does not answer: is \`baton start\` running?`);
  }
  return redis;
}

/**
 * `baton start` on a Redis without any API key makes an admin key for scope `dev`, so the
 * README's first request works; with keys present it makes none (and cannot show an old
 * one: only hashes are stored).
 */
export async function ensureDevKey(redis: Redis, config: Config): Promise<string | undefined> {
  const store = new ApiKeyStore(redis, createKeys(config.BATON_KEY_PREFIX));
  if (await store.any()) return undefined;
  return (await store.create('dev', 'admin')).key;
}
