import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import type { Redis, Cluster } from 'ioredis';

/**
 * Loads every `lua/<name>-<numKeys>.lua`, inlines `--@include lib`, and registers it on a
 * connection with defineCommand under a versioned name (`baton_<name>_v1`), so a script
 * change never collides with an older process's cached SHA during a rolling deploy.
 */
const LUA_DIR = fileURLToPath(new URL('./lua/', import.meta.url));
const VERSION = 1;

export type ScriptName =
  | 'submit' | 'claim' | 'heartbeat' | 'append' | 'step' | 'retry'
  | 'finish' | 'block' | 'resolve' | 'cancel' | 'repair' | 'release'
  | 'drain' | 'undrain' | 'rate-limit';

interface ScriptSource { name: ScriptName; numberOfKeys: number; lua: string }

function loadSources(): ScriptSource[] {
  const lib = readFileSync(join(LUA_DIR, 'lib.lua'), 'utf8');
  return readdirSync(LUA_DIR)
    .map((file) => /^([a-z-]+?)-(\d+)\.lua$/.exec(file))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({
      name: m[1] as ScriptName,
      numberOfKeys: Number(m[2]),
      lua: readFileSync(join(LUA_DIR, m[0]), 'utf8').replace('--@include lib', lib),
    }));
}

let sources: ScriptSource[] | undefined;

export type Connection = Redis | Cluster;
type ScriptReply = unknown[];

/** Calls a registered script: `run(redis, 'claim', [runKey], argv)`. */
export async function runScript(
  redis: Connection,
  name: ScriptName,
  keys: string[],
  argv: (string | number)[],
): Promise<ScriptReply> {
  const fn = (redis as unknown as Record<string, (...a: unknown[]) => Promise<ScriptReply>>)[
    `baton_${name}_v${VERSION}`
  ];
  if (!fn) throw new Error(`script ${name} is not registered on this connection`);
  return fn.call(redis, ...keys, ...argv);
}

export function registerScripts(redis: Connection): void {
  sources ??= loadSources();
  for (const s of sources) {
    redis.defineCommand(`baton_${s.name}_v${VERSION}`, { numberOfKeys: s.numberOfKeys, lua: s.lua });
  }
}
