import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import type { Redis, Cluster, ChainableCommander } from 'ioredis';
import { luaCodes } from './script-codes.ts';

/**
 * Baton's transitions are one Redis Function library, `baton_v<VERSION>_<digest>`: the code
 * tables generated from script-codes.ts (`CODE`, `OUTCOME`), the helper files `lib/*.lua`
 * in the order of HELPER_FILES (the per-call state, then the helpers by concern), then every
 * `lua/<name>.lua` as the function `baton_<name>_v<VERSION>_<digest>`, its body the file's text
 * run after begin() (with the call's O, K, ARGV and BASE as locals when it names them).
 * The library is loaded once per Redis server (FUNCTION LOAD), so a call pays for its own
 * body only; a script that inlined the helpers built them again on every call. The digest
 * (of the library's text) makes a library whose text changed another library, never
 * shadowed by the one a server loaded before (a server keeps a library until it restarts
 * without persistence or is flushed), and keeps an older process's library apart from the
 * newer one's during a deploy. Only the units of this room (transitions/<name>.ts)
 * call them; `npm test` checks that nothing else does.
 *
 * A server that lacks the library (a fresh or restarted Redis without persistence, a
 * FUNCTION FLUSH) answers "Function not found": the library is loaded then and the call made
 * again (on a Cluster, into every master). Redis 7.0 or later is required.
 */
const LUA_DIR = fileURLToPath(new URL('./', import.meta.url));
/**
 * Bumped whenever a script's calling convention or the meaning of what it stores changes.
 * - v2: named KEYS and one JSON options argument;
 * - v3: a lease's deadline is its score in the lease index only;
 * - v4: a run's finish looks for waits only when its record's `waited` is not 0 (the wait
 *   script sets it), and the transitions are a Redis Function library;
 * - v5: dispatched runs are scored in the lease index (no `pending`), runtime stats count
 *   status moves, a session head's record says whether runs were queued behind it (`behind`);
 * - v6: dispatch orders name the run's agent (one queue per runtime and agent), and `unserved`
 *   fails runs no worker serves;
 * - v7: the submit indexes a run by agent and by runtime (KEYS agentRuns, runtimeRuns), refuses
 *   a turn past the session's history cap (KEYS messages) and stamps a head's `historyMem`; the
 *   claim reads at most historyBytes of history and says whether it cut (`cut`); `history-page`
 *   reads a page of history by count and bytes; `artifact` stores an upload within its scope's
 *   quotas, and the step script counts usage past USAGE_ROWS_PER_DAY under `_other`; the wait
 *   script's `status: waiting` event carries the waits new in the park, `pending` and
 *   `dropped`, not every pending wait again;
 * - v8: scripts read a record's fields by name (readFields) and list the helpers they use
 *   (`-- @uses`), a run's finish looks for waits only when `waited` is 1 (every record the submit
 *   writes carries it), and an idempotency key must hold `<runId> <requestHash>` (the run id
 *   alone is no longer read);
 * - v9: a fork is begun (`fork`) and copied in chunks of a bounded size (`fork-copy`) into a
 *   staging list that its last chunk renames to the new session's history; `fork-scan` reads
 *   a page of history's runIds and sizes, for the fork's end; submits count a scope's stored
 *   bytes and `storage` lets the sweeper take expired runs' bytes off;
 * - v10: multitask `steer` (the submit's `message`, KEYS steering) and `steer`, which takes a
 *   run's steering messages at a boundary; a run's finish makes those left its session's next turns;
 * - v11: `delete` removes an ended run's keys, its listings' entries and its stored bytes at once;
 * - v12: the helpers are files by concern (lib/), the call's state one table (`call`), the
 *   reply codes named (`CODE`, `OUTCOME`, generated from script-codes.ts); replies unchanged.
 * - v12 (too): the submit's options no longer repeat the new run's id, session, runtime and ttlMs:
 *   the record (ARGV pairs) is the one place they cross, read once at the script's top.
 * - v12 (too): the append replies one code a run, without the id of its last event (nobody read it).
 */
const VERSION = 12;

export type ScriptName =
  | 'submit' | 'claim' | 'heartbeat' | 'append' | 'step' | 'retry'
  | 'finish' | 'block' | 'resolve' | 'cancel' | 'delete' | 'repair' | 'release'
  | 'drain' | 'undrain'
  | 'wait' | 'resume' | 'wait-timeout' | 'due' | 'expire' | 'timeout' | 'fill' | 'unserved'
  | 'steer' | 'history-page' | 'artifact' | 'rate-bucket' | 'fork' | 'fork-copy' | 'fork-scan' | 'storage' | 'read-cost' | 'budget-hold'
  | 'schedule-pause' | 'schedule-resume' | 'schedule-claim' | 'schedule-done'
  | 'bulk-create' | 'bulk-cancel' | 'bulk-claim' | 'bulk-commit';

interface Library { name: string; functions: ReadonlyMap<string, string>; source: string }
let library: Library | undefined;

/**
 * The helper files (lib/<name>.lua) in the order the library holds them: each may use the
 * helpers of those before it (its `-- @uses` lines say which; scripts/check-lua.mjs checks them).
 */
export const HELPER_FILES = [
  'call', 'records', 'events', 'status', 'limits', 'admission', 'sessions', 'storage', 'waits', 'finish', 'reruns', 'rate-window',
] as const;

/** The locals a transition's body may name (core of the call, transitions/lib/call.lua): declared for it when it does. */
const BODY_LOCALS = { O: 'call.O', K: 'call.K', ARGV: 'call.argv', BASE: 'call.base' } as const;

/**
 * The texts the library is made of: the generated code tables (`codes`), the helper files by
 * name in library order, and each transition's body, by name.
 */
export function luaSources(): { codes: string; helpers: [string, string][]; bodies: [string, string][] } {
  const read = (file: string) => readFileSync(join(LUA_DIR, file), 'utf8');
  const bodies: [string, string][] = [];
  for (const file of readdirSync(LUA_DIR).sort()) {
    const m = /^([a-z-]+)\.lua$/.exec(file);
    if (m) bodies.push([m[1], read(file)]);
  }
  return { codes: luaCodes(), helpers: HELPER_FILES.map((name) => [name, read(`lib/${name}.lua`)]), bodies };
}

/** A body's opening: the call begun, and the locals of the call it names (BODY_LOCALS). */
export function bodyOpening(body: string): string {
  const named = Object.entries(BODY_LOCALS).filter(([local]) => new RegExp(`(?<![.\\w])${local}\\b`).test(body));
  const locals = named.length ? `local ${named.map(([l]) => l).join(', ')} = ${named.map(([, v]) => v).join(', ')}` : '';
  return `begin(keys, args)${locals ? `; ${locals}` : ''}`;
}

type Sources = ReturnType<typeof luaSources>;

/**
 * The library's text from its sources, tagged `tag` (`v<VERSION>_<digest>`), and its functions'
 * names by transition (scripts/check-lua.mjs checks the same text).
 */
export function assembleLibrary(sources: Sources, tag: string): { source: string; functions: Map<string, string> } {
  const parts = [`#!lua name=baton_${tag}`, sources.codes, ...sources.helpers.map(([, text]) => text)];
  const functions = new Map<string, string>();
  for (const [transition, body] of sources.bodies) {
    const fn = `baton_${transition.replaceAll('-', '_')}_${tag}`;
    functions.set(transition, fn);
    // The body runs as a function of its own, so its reply passes withDeferred (events.lua) on the way out.
    parts.push(`redis.register_function('${fn}', function(keys, args)\n${bodyOpening(body)}\n` +
      `return withDeferred((function()\n${body}\nend)())\nend)`);
  }
  return { source: parts.join('\n'), functions };
}

/** The library (built once): its name, its functions' names by transition, its source. */
function built(): Library {
  if (library) return library;
  const sources = luaSources();
  const digest = createHash('sha256');
  digest.update(`${sources.codes}\0`);
  for (const [, text] of sources.helpers) digest.update(`${text}\0`);
  for (const [name, body] of sources.bodies) digest.update(`${name}\0${body}\0`);
  const tag = `v${VERSION}_${digest.digest('hex').slice(0, 12)}`;
  library = { name: `baton_${tag}`, ...assembleLibrary(sources, tag) };
  return library;
}

/** The library's source: helpers first, then one registered function per transition file. */
export const librarySource = (): string => built().source;

/** The library's name, `baton_v<VERSION>_<digest of its text>`. */
export const libraryName = (): string => built().name;

export type Connection = Redis | Cluster;

/** A call's options, already encoded as one JSON object (the gateway builds it; see wire()). */
export interface OptionsJson { json: string }

/** A script's keys by name (its header lists them); undefined entries are left out. */
export type NamedKeys = Record<string, string | undefined>;

/**
 * The wire form of a call: KEYS in the order of their names, the names travel in the
 * options (`O.k`), so neither side depends on a position.
 */
export function wire(keys: NamedKeys, options: OptionsJson, payload: readonly (string | number)[]): [number, ...(string | number)[]] {
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

/** The function a transition is (`baton_<name>_v<VERSION>_<digest>`). */
export function functionName(name: ScriptName): string {
  const fn = built().functions.get(name);
  if (!fn) throw new Error(`no lua/${name}.lua in the transitions library`);
  return fn;
}

/** Whether a call failed because the server lacks the library (it never had it, or lost it). */
export function isMissingLibrary(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('ERR Function not found');
}

/** Loads in progress, one per connection: calls that all find the library missing wait on one load. */
const loading = new WeakMap<Connection, Promise<void>>();

/**
 * Loads the library into the server(s) behind `redis` (REPLACE: a load racing another
 * process's load of the same library is harmless). A server without Redis Functions gets an
 * error that says what Baton needs.
 */
export function loadLibrary(redis: Connection): Promise<void> {
  let pending = loading.get(redis);
  if (!pending) {
    const source = librarySource();
    const targets: Redis[] = redis.isCluster ? (redis as Cluster).nodes('master') : [redis as Redis];
    pending = Promise.all(targets.map((node) => node.function('LOAD', 'REPLACE', source)))
      .then(() => undefined, (err: Error) => {
        if (/unknown command/i.test(err.message)) {
          throw new Error(`Baton needs Redis 7.0 or later (Redis Functions); the server answered: ${err.message}`);
        }
        throw err;
      })
      .finally(() => loading.delete(redis));
    loading.set(redis, pending);
  }
  return pending;
}

/**
 * Queues a transition on a pipeline; its reply comes with the pipeline's exec(). A reply
 * that is isMissingLibrary() means: loadLibrary(), then the pipeline again.
 */
export function queueScript(
  pipe: ChainableCommander, name: ScriptName, keys: NamedKeys, options: OptionsJson,
): void {
  void pipe.fcall(functionName(name), ...wire(keys, options, []));
}
