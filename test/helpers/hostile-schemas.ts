/**
 * The output schemas of issue 12's report, built small enough to read: each stalled a
 * process before the schema guard. Shared by the guard's unit test, the HTTP test and the fuzz test.
 */

/** `allOf` of two `$ref`s to the next level, `levels` deep (2 KB at 24): validation work doubles per level. */
export function exponentialSchema(levels: number): Record<string, unknown> {
  const definitions: Record<string, unknown> = {};
  for (let i = 0; i < levels; i++) definitions[`l${i}`] = { allOf: [{ $ref: `#/definitions/l${i + 1}` }, { $ref: `#/definitions/l${i + 1}` }] };
  definitions[`l${levels}`] = { type: 'number' };
  return { definitions, $ref: '#/definitions/l0' };
}

/** `n` patternProperties: 5,000 (174 KB here, 184 KB in the report) took 7.8 s and 266 MB to compile. */
export function patternBomb(n: number): Record<string, unknown> {
  const patternProperties: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) patternProperties[`^p${i}_[a-z]+$`] = { type: 'string' };
  return { type: 'object', patternProperties };
}

/** Backtracking engines take time exponential in the number of `a`s before a `!`. */
export const REDOS_SCHEMA = { type: 'string', pattern: '^(a+)+$' };
export const REDOS_ANSWER = JSON.stringify(`${'a'.repeat(29)}!`);

/** Validates arrays of arrays at any depth: an answer nested 20,000 deep overflowed the stack. */
export const RECURSIVE_SCHEMA = { type: 'array', items: { $ref: '#' } };

/** `depth` levels of `not`, a schema nested `depth` deep. */
export function nestedSchema(depth: number): Record<string, unknown> {
  let s: Record<string, unknown> = { type: 'string' };
  for (let i = 1; i < depth; i++) s = { not: s };
  return s;
}

/**
 * Issue 29's wait schema: two `anyOf` branches that each go one level into an array. A value
 * `levels` deep that fails at the bottom is tried 2^levels times (23 levels: seconds of work
 * per resume, within every static limit).
 */
export const EXPONENTIAL_ANYOF = { anyOf: [{ type: 'array', items: { $ref: '#' } }, { type: 'array', items: { $ref: '#' } }] };

/** `levels` arrays around a number: what EXPONENTIAL_ANYOF takes exponential time to refuse. */
export function nestedArrays(levels: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

/** Schemas that refer back to themselves without descending into the value: validating any value recurses forever. */
export const SELF_REFERENCES: [string, Record<string, unknown>][] = [
  ['$ref: "#"', { $ref: '#' }],
  ['a loop through definitions and allOf', { definitions: { a: { allOf: [{ $ref: '#/definitions/b' }] }, b: { anyOf: [{ type: 'string' }, { $ref: '#/definitions/a' }] } }, $ref: '#/definitions/a' }],
  ['a loop through not and an $anchor (2020-12)', { $schema: 'https://json-schema.org/draft/2020-12/schema', $defs: { x: { $anchor: 'x', not: { $ref: '#x' } } }, properties: { p: { $ref: '#/$defs/x' } } }],
  ['a loop inside a sub-resource with its own $id', { properties: { p: { $id: 'https://example.test/p.json', if: { $ref: '#' } } } }],
];
