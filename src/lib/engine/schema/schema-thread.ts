import { parentPort, workerData } from 'node:worker_threads';
import { Ajv, type ErrorObject, type Options, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { valueDepthOver } from './schema-limits.ts';
import { linearRegExp } from './schema-regexp.ts';

/**
 * The schema guard's worker thread: compiles output schemas with ajv and validates answers
 * against them, so neither ever runs on a process's event loop. The guard (schema-guard.ts)
 * sends one request at a time and terminates this thread when a request overruns its
 * budget; nothing here needs to be interruptible.
 */

export interface ThreadSettings {
  cacheEntries: number;
  maxValueDepth: number;
}

/**
 * What the guard asks: `key` is the schema text's hash, the cache key; `patterns` are the
 * schema's regular expressions, as the static limits found them.
 */
export type ThreadJob =
  | { op: 'check'; key: string; schema: string; patterns: string[] }
  | { op: 'validate'; key: string; schema: string; patterns: string[]; value: string };

export type ThreadRequest = ThreadJob & { id: number };

export interface Problem { path: string; message: string }

export type ThreadReply =
  | { id: number; ok: true }
  /** The schema does not compile (invalid, unresolvable, or a pattern RE2 refuses). */
  | { id: number; ok: false; reason: 'schema'; message: string }
  /** The value does not match, is too deep, or validating it threw (a RangeError on deep input). */
  | { id: number; ok: false; reason: 'value'; problems: Problem[] };

/** Sent once, after warm-up: the guard starts a request's budget only when the thread can begin it. */
export interface ThreadReady { ready: true }

/** Validation errors kept per answer: enough to see what is wrong, bounded for the run record. */
const MAX_PROBLEMS = 50;

const options: Options = {
  // Every problem, not only the first: they go to the run's lastError.details.
  allErrors: true,
  // Schemas written for model providers carry annotations ajv does not know; refusing them
  // would turn a harmless schema into a 400.
  strict: false,
  // `required: ["constructor"]` must not be met by what every object inherits.
  ownProperties: true,
  // Warnings (an unknown format) are not the host process's log lines.
  logger: false,
  // Ajv's optimization pass made compiling three times slower for a few percent of
  // validation speed; a tenant's schema is compiled more often than any one answer is validated.
  code: { regExp: linearRegExp, optimize: false },
};

/**
 * Meta-schema checks run on one shared instance per draft, but each schema compiles in an
 * Ajv instance of its own: ajv registers every `$id` it compiles on the instance, and on a
 * shared one a tenant's `$id` would collide with, or be resolved by, another tenant's schema.
 * A fresh instance without the meta check costs about a millisecond.
 */
const meta = { draft7: new Ajv(options), draft2020: new Ajv2020(options) };
const compileOptions: Options = { ...options, validateSchema: false };

const settings = workerData as ThreadSettings;
/** Compiled validators by the schema's hash; a Map keeps insertion order, so the first key is the least recently used. */
const cache = new Map<string, ValidateFunction>();

function validatorFor({ key, schema: text, patterns }: ThreadJob): ValidateFunction {
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  // Every pattern must be one RE2 runs, also those ajv would skip (patternProperties whose
  // schema accepts anything): a schema is refused or accepted whole, not by what it uses.
  for (const p of patterns) linearRegExp(p);
  const schema = JSON.parse(text) as Record<string, unknown>;
  const is2020 = typeof schema.$schema === 'string' && schema.$schema.includes('2020-12');
  const checker = is2020 ? meta.draft2020 : meta.draft7;
  if (!checker.validateSchema(schema)) throw new Error(`schema is invalid: ${checker.errorsText(checker.errors)}`);
  const fn = (is2020 ? new Ajv2020(compileOptions) : new Ajv(compileOptions)).compile(schema);
  if (cache.size >= settings.cacheEntries) cache.delete(cache.keys().next().value!);
  cache.set(key, fn);
  return fn;
}

function handle(req: ThreadRequest): ThreadReply {
  let validate: ValidateFunction;
  try {
    validate = validatorFor(req);
  } catch (err) {
    return { id: req.id, ok: false, reason: 'schema', message: String((err as Error)?.message ?? err).slice(0, 500) };
  }
  if (req.op === 'check') return { id: req.id, ok: true };
  const refuse = (message: string): ThreadReply => ({ id: req.id, ok: false, reason: 'value', problems: [{ path: '/', message }] });
  let value: unknown;
  try {
    value = JSON.parse(req.value);
  } catch {
    return refuse('the value is not JSON');
  }
  if (valueDepthOver(value, settings.maxValueDepth)) {
    return refuse(`the value is nested deeper than ${settings.maxValueDepth} levels (maxValueDepth)`);
  }
  try {
    if (validate(value)) return { id: req.id, ok: true };
  } catch (err) {
    // Whatever validation throws is the answer's failure, reported, never the thread's end.
    const e = err as Error;
    return refuse(`validation failed: ${e?.name ?? 'Error'}: ${String(e?.message ?? err).slice(0, 300)}`);
  }
  const errors = validate.errors ?? [];
  const problems = errors.slice(0, MAX_PROBLEMS).map(toProblem);
  if (errors.length > MAX_PROBLEMS) problems.push({ path: '/', message: `and ${errors.length - MAX_PROBLEMS} more errors` });
  return { id: req.id, ok: false, reason: 'value', problems };
}

function toProblem(e: ErrorObject): Problem {
  return { path: e.instancePath || '/', message: `${e.message ?? 'is invalid'}${paramsText(e)}` };
}

function paramsText(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  if (typeof p.additionalProperty === 'string') return `: ${p.additionalProperty}`;
  if (Array.isArray(p.allowedValues)) return `: ${p.allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
  return '';
}

// Warm-up: ajv compiles each draft's meta-schema on first use (tens of ms), which belongs
// to the thread's start, not to the first tenant's budget.
meta.draft7.validateSchema({});
meta.draft2020.validateSchema({});
new Ajv(compileOptions).compile({ type: 'string', pattern: '^a' });

const port = parentPort!;
port.on('message', (req: ThreadRequest) => port.postMessage(handle(req)));
port.postMessage({ ready: true } satisfies ThreadReady);
