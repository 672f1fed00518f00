import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import type { Redis, Cluster, ChainableCommander } from 'ioredis';

/**
 * Loads every `lua/<name>.lua`, inlines `--@include core` (core.lua) or `--@include lib`
 * (core.lua, then lib.lua), and registers it on a connection
 * with defineCommand under a versioned name (`baton_<name>_v4`), so a script change never
 * collides with an older process's cached SHA during a rolling deploy. Only the transitions
 * gateway (transitions.ts) calls them; `npm test` checks that nothing else does.
 */
const LUA_DIR = fileURLToPath(new URL('./lua/', import.meta.url));
/** Bumped whenever a script's calling convention or the meaning of what it stores changes. v2: named KEYS and one JSON options argument; v3: a lease's deadline is its score in the lease index only; v4: a run's finish looks for waits only when its record's `waited` is not 0 (the wait script sets it). */
const VERSION = 4;

export type ScriptName =
  | 'submit' | 'claim' | 'heartbeat' | 'append' | 'step' | 'retry'
  | 'finish' | 'block' | 'resolve' | 'cancel' | 'repair' | 'release'
  | 'drain' | 'undrain'
  | 'wait' | 'resume' | 'wait-timeout' | 'due' | 'expire' | 'timeout';

let sources: Map<string, string> | undefined;

function loadSources(): Map<string, string> {
  const core = readFileSync(join(LUA_DIR, 'core.lua'), 'utf8');
  const includes: Record<string, string> = { core, lib: `${core}\n${readFileSync(join(LUA_DIR, 'lib.lua'), 'utf8')}` };
  const out = new Map<string, string>();
  for (const file of readdirSync(LUA_DIR)) {
    const m = /^([a-z-]+)\.lua$/.exec(file);
    if (!m || m[1] in includes) continue;
    // A function, not the text: `$'` and `$&` in Lua patterns are not replacement patterns.
    const text = readFileSync(join(LUA_DIR, file), 'utf8').replace(/^--@include (core|lib)$/m, (_, name: string) => includes[name]);
    if (/^--@include/m.test(text)) throw new Error(`lua/${file}: one --@include core or --@include lib, on a line of its own`);
    out.set(m[1], text);
  }
  return out;
}

export type Connection = Redis | Cluster;

/** A call's options, already encoded as one JSON object (the gateway builds it; see wire()). */
export interface OptionsJson { json: string }

/** A script's keys by name (its header lists them); undefined entries are left out. */
export type NamedKeys = Record<string, string | undefined>;

type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

/**
 * The wire form of a call: KEYS in the order of their names, the names travel in the
 * options (`O.k`), so neither side depends on a position.
 */
function wire(keys: NamedKeys, options: OptionsJson, payload: readonly (string | number)[]): (string | number)[] {
  const names: string[] = [];
  const values: string[] = [];
  for (const name in keys) {
    const key = keys[name];
    if (key === undefined) continue;
    names.push(name);
    values.push(key);
  }
  // `k` (the key names) goes first so the object stays one JSON text: `{"k":[...],<options>}`.
  return [values.length, ...values, `{"k":${JSON.stringify(names)},${options.json.slice(1)}`, ...payload];
}

const commandName = (name: ScriptName) => `baton_${name.replace('-', '_')}_v${VERSION}`;

function scriptFn(target: Connection | ChainableCommander, name: ScriptName): ScriptFn {
  const fn = (target as unknown as Record<string, ScriptFn>)[commandName(name)];
  if (!fn) throw new Error(`script ${name} is not registered on this connection`);
  return fn;
}

/** Calls a registered script; the reply is raw (the gateway decodes it). */
export function callScript(
  redis: Connection, name: ScriptName, keys: NamedKeys, options: OptionsJson,
  payload: readonly (string | number)[] = [],
): Promise<unknown> {
  return scriptFn(redis, name).apply(redis, wire(keys, options, payload));
}

/** Queues a script call on a pipeline; its reply comes with the pipeline's exec(). */
export function queueScript(
  pipe: ChainableCommander, name: ScriptName, keys: NamedKeys, options: OptionsJson,
): void {
  void scriptFn(pipe, name).apply(pipe, wire(keys, options, []));
}

export function registerScripts(redis: Connection): void {
  sources ??= loadSources();
  for (const [name, lua] of sources) redis.defineCommand(commandName(name as ScriptName), { lua });
}
