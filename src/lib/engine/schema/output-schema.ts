import { OutputInvalidError } from '../../sdk/errors.ts';
import { processSchemaGuard, type SchemaGuard } from './schema-guard.ts';

/**
 * The submit's `outputSchema` (a JSON Schema) and the check of a goal finish against it.
 *
 * Draft-07 by default, 2020-12 when the schema says so in `$schema`. Unknown keywords are
 * allowed: schemas written for model providers carry annotations ajv does not know. A
 * schema over a limit, not valid against its meta-schema, referring to something ajv
 * cannot resolve, or with a pattern RE2 cannot run, is refused. Compiling and validating
 * happen in the schema guard's worker thread, within a time budget (schema-guard.ts).
 */

/**
 * At submit: a schema the guard refuses is a 400 OUTPUT_SCHEMA_INVALID naming the reason;
 * a scope with too many checks already waiting for the guard is 429 SCHEMA_CHECKS_BUSY.
 * `signal`: the request's, so a submit whose client left is not checked at all.
 */
export async function assertValidOutputSchema(
  schema: Record<string, unknown>,
  guard: SchemaGuard = processSchemaGuard(),
  scope = '',
  signal?: AbortSignal,
): Promise<void> {
  await guard.check(schema, { scope, bounded: true, signal });
}

export interface ValidationProblem { path: string; message: string }

/**
 * Validates a goal finish. The agent's `payload` is validated when it returned one;
 * otherwise the answer text is parsed as JSON (a model asked for structured output
 * answers with it as text). Returns the validated value; throws OutputInvalidError with
 * the validation errors otherwise, also when validation overran its budget or threw.
 */
export async function validateOutput(
  schema: Record<string, unknown>,
  result: { answer: string; payload?: unknown },
  guard: SchemaGuard = processSchemaGuard(),
  scope = '',
): Promise<unknown> {
  if (result.payload !== undefined) return guard.validate(schema, result.payload, undefined, scope);
  let value: unknown;
  try {
    value = JSON.parse(result.answer);
  } catch {
    throw new OutputInvalidError([{ path: '', message: 'the answer is not JSON and the agent returned no payload' }]);
  }
  return guard.validate(schema, value, result.answer, scope);
}
