import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { BatonError } from '../errors.ts';
import { OutputInvalidError } from '../sdk/errors.ts';

/**
 * The submit's `outputSchema` (a JSON Schema) and the check of a goal finish against it.
 *
 * Draft-07 by default, 2020-12 when the schema says so in `$schema`. Unknown keywords are
 * allowed (`strict: false`): schemas written for model providers carry annotations ajv does
 * not know, and rejecting them would turn a harmless schema into a 400. A schema that is
 * not valid against its meta-schema, or that refers to something ajv cannot resolve, is.
 */
const drafts = {
  default: new Ajv({ allErrors: true, strict: false }),
  2020: new Ajv2020({ allErrors: true, strict: false }),
};

/**
 * Compiled validators by schema text: a runtime's runs usually share a handful of schemas.
 * Bounded, and an evicted schema is removed from its Ajv instance too (Ajv keeps every
 * schema object it ever compiled).
 */
interface Compiled { fn: ValidateFunction; ajv: Ajv; schema: object }
const cache = new Map<string, Compiled>();
const CACHE_MAX = 500;

function compile(schema: Record<string, unknown>): ValidateFunction {
  const text = JSON.stringify(schema);
  const hit = cache.get(text);
  if (hit) return hit.fn;
  const is2020 = typeof schema.$schema === 'string' && schema.$schema.includes('2020-12');
  const ajv: Ajv = is2020 ? drafts[2020] : drafts.default;
  // `$id`s would collide across submits in one shared Ajv instance; the validator does not need them.
  const { $id: _ignored, ...anonymous } = schema;
  let fn: ValidateFunction;
  try {
    fn = ajv.compile(anonymous);
  } catch (err) {
    ajv.removeSchema(anonymous);
    throw err;
  }
  if (cache.size >= CACHE_MAX) {
    const [oldest, old] = cache.entries().next().value!;
    cache.delete(oldest);
    old.ajv.removeSchema(old.schema);
  }
  cache.set(text, { fn, ajv, schema: anonymous });
  return fn;
}

/** At submit: a schema ajv cannot compile is a 400 OUTPUT_SCHEMA_INVALID naming the reason. */
export function assertValidOutputSchema(schema: Record<string, unknown>): void {
  try {
    compile(schema);
  } catch (err) {
    throw new BatonError('OUTPUT_SCHEMA_INVALID', undefined, [
      { path: 'body.outputSchema', message: (err as Error).message.slice(0, 500) },
    ]);
  }
}

export interface ValidationProblem { path: string; message: string }

/**
 * Validates a goal finish. The agent's `payload` is validated when it returned one;
 * otherwise the answer text is parsed as JSON (a model asked for structured output
 * answers with it as text). Returns the validated value; throws OutputInvalidError with
 * the validation errors otherwise.
 */
export function validateOutput(schema: Record<string, unknown>, result: { answer: string; payload?: unknown }): unknown {
  let value = result.payload;
  if (value === undefined) {
    try {
      value = JSON.parse(result.answer);
    } catch {
      throw new OutputInvalidError([{ path: '', message: 'the answer is not JSON and the agent returned no payload' }]);
    }
  }
  const validate = compile(schema);
  if (validate(value)) return value;
  throw new OutputInvalidError((validate.errors ?? []).map(toProblem));
}

function toProblem(e: ErrorObject): ValidationProblem {
  return { path: e.instancePath || '/', message: `${e.message ?? 'is invalid'}${paramsText(e)}` };
}

function paramsText(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  if (typeof p.additionalProperty === 'string') return `: ${p.additionalProperty}`;
  if (Array.isArray(p.allowedValues)) return `: ${p.allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
  return '';
}
