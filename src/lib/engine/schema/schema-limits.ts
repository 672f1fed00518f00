import { selfReference } from './schema-cycles.ts';

/**
 * Every bound on a tenant's `outputSchema` and on what is validated against it, in one place.
 *
 * The static limits are checked on the parsed schema before ajv sees it: ajv's compile time
 * and memory grow with the schema's size, and ajv compiles and validates by recursion. A
 * schema within them compiles in milliseconds; what slips through anyway (a schema whose
 * validation is exponential in a few hundred bytes) is cut off by the guard's time budget.
 *
 * The numbers leave room for the schemas that structured-output APIs of model providers
 * accept (a few hundred properties, about ten levels of objects, enums of a few hundred
 * values), and stop well before the sizes that stalled a process: 5,000 patternProperties
 * (184 KB) took 7.8 s and 266 MB to compile.
 */
export interface SchemaLimits {
  /**
   * Bytes of the schema as JSON: 64 KiB. A generous structured-output schema is a few KiB;
   * every schema is stored on its run record and compiled by every worker that finishes one.
   */
  maxBytes: number;
  /**
   * Nesting depth of the schema document (the schema object is 1, each object or array
   * inside adds 1): 64, about 30 levels of nested `properties`. Far beyond real schemas;
   * it keeps ajv's recursive compile far from the stack limit.
   */
  maxDepth: number;
  /**
   * Object members in the whole document, keywords and property names alike: 2,000, about
   * 600 properties with a type and a constraint each. Compile time grows with it (ajv
   * generates code for every keyword): about 0.3 s at the limit on a busy 2-core machine.
   */
  maxMembers: number;
  /**
   * Regular expressions (`pattern` values plus `patternProperties` keys): 64. Each is
   * compiled to an automaton, and every key of a validated object is tested against every
   * `patternProperties` entry, so their number multiplies validation work.
   */
  maxPatterns: number;
  /**
   * Characters of one regular expression: 1,000. RE2's program grows with the pattern (and
   * refuses repetition counts above 1,000 by itself); no format a schema checks needs more.
   */
  maxPatternChars: number;
  /**
   * `enum` values in the whole document: 2,000. Each is compared with deep equality to the
   * validated value.
   */
  maxEnumValues: number;
  /**
   * Nesting depth of a validated answer or payload: 256. A structured answer is a few levels
   * deep; validation recurses per level, and the payload is serialized again by the finish
   * transition and by the API, all of which must stay clear of the stack limit.
   */
  maxValueDepth: number;
}

export const SCHEMA_LIMITS: Readonly<SchemaLimits> = Object.freeze({
  maxBytes: 64 * 1024,
  maxDepth: 64,
  maxMembers: 2_000,
  maxPatterns: 64,
  maxPatternChars: 1_000,
  maxEnumValues: 2_000,
  maxValueDepth: 256,
});

/** What the schema guard's worker thread may spend. */
export interface SchemaGuardBudget {
  /**
   * Milliseconds one compile may take before the thread is terminated and the schema
   * refused: 2 s. Schemas at the static limits compiled in 0.05 to 0.25 s on the 2-core
   * development machine under a load of 6, so only a hostile one reaches it; and only the
   * thread waits, never a process's event loop.
   */
  compileMs: number;
  /**
   * Milliseconds one validation (with the compile, when this thread has not seen the schema
   * yet) may take before the thread is terminated and the answer refused: 2 s, for the
   * same reasons. A run whose validation runs out fails with OUTPUT_INVALID; it is not
   * retried, because the same answer would take as long again.
   */
  validateMs: number;
  /**
   * V8 old-generation heap of the thread: 128 MB. The static limits keep a compile to a few
   * MB; this caps what a schema that passes them anyway can take from the process.
   */
  heapMb: number;
  /**
   * Compiled validators the thread keeps, least recently used evicted first: 200. A
   * runtime's runs usually share a handful of schemas; at most a few MB.
   */
  cacheEntries: number;
}

export const SCHEMA_GUARD_BUDGET: Readonly<SchemaGuardBudget> = Object.freeze({
  compileMs: 2_000,
  validateMs: 2_000,
  heapMb: 128,
  cacheEntries: 200,
});

/**
 * The first limit a schema exceeds: which one (its name in docs/tenancy.md, "Output schemas"),
 * where, and the message to answer with. `selfReference`: the schema refers back to itself
 * without descending into the value (schema-cycles.ts), so validating would recurse until the
 * stack overflows.
 */
export interface LimitViolation {
  limit: keyof SchemaLimits | 'selfReference';
  /** Where in the schema, dot-separated from the schema's root ('' = the whole schema). */
  at: string;
  message: string;
}

/** A node of the walk: its parent chain gives its path, built only when a violation needs it. */
interface Step { value: unknown; depth: number; key: string; parent: Step | undefined }

function pathOf(step: Step | undefined): string {
  const keys: string[] = [];
  for (let s = step; s?.parent; s = s.parent) keys.push(s.key.length > 40 ? `${s.key.slice(0, 40)}…` : s.key);
  return keys.reverse().join('.');
}

/**
 * Checks a parsed schema against the static limits; returns the first violation, or the
 * schema's JSON text and its regular expressions when it is within them. The walk is
 * iterative and does not descend past maxDepth, so no schema, however deep, can overflow
 * the stack here.
 */
export function checkSchemaLimits(
  schema: unknown,
  limits: SchemaLimits = SCHEMA_LIMITS,
): { ok: true; text: string; patterns: string[] } | { ok: false; violation: LimitViolation } {
  let members = 0;
  const found: string[] = [];
  let enumValues = 0;
  const fail = (limit: LimitViolation['limit'], at: Step | undefined, message: string) =>
    ({ ok: false as const, violation: { limit, at: pathOf(at), message } });
  const pattern = (p: string, at: Step) =>
    p.length > limits.maxPatternChars
      ? fail('maxPatternChars', at, `a regular expression has ${p.length} characters; the limit is ${limits.maxPatternChars} (maxPatternChars)`)
      : undefined;

  const stack: Step[] = [{ value: schema, depth: 1, key: '', parent: undefined }];
  while (stack.length) {
    const step = stack.pop()!;
    const v = step.value;
    if (v === null || typeof v !== 'object') continue;
    if (step.depth > limits.maxDepth) {
      return fail('maxDepth', step, `the schema is nested deeper than ${limits.maxDepth} levels (maxDepth)`);
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) stack.push({ value: v[i], depth: step.depth + 1, key: String(i), parent: step });
      continue;
    }
    for (const [key, child] of Object.entries(v)) {
      members++;
      const here: Step = { value: child, depth: step.depth + 1, key, parent: step };
      // A property *named* "pattern" or "enum" holds a schema (an object), not a keyword's
      // value, so testing the value's type tells the keyword apart.
      if (key === 'pattern' && typeof child === 'string') {
        found.push(child);
        const bad = pattern(child, here);
        if (bad) return bad;
      } else if (key === 'patternProperties' && child !== null && typeof child === 'object' && !Array.isArray(child)) {
        for (const p of Object.keys(child)) {
          found.push(p);
          const bad = pattern(p, { value: undefined, depth: here.depth + 1, key: p, parent: here });
          if (bad) return bad;
        }
      } else if (key === 'enum' && Array.isArray(child)) {
        enumValues += child.length;
      }
      stack.push(here);
    }
    if (members > limits.maxMembers) {
      return fail('maxMembers', undefined, `the schema has more than ${limits.maxMembers} object members (keywords and property names; maxMembers)`);
    }
    if (found.length > limits.maxPatterns) {
      return fail('maxPatterns', undefined, `the schema has more than ${limits.maxPatterns} regular expressions (pattern and patternProperties; maxPatterns)`);
    }
    if (enumValues > limits.maxEnumValues) {
      return fail('maxEnumValues', undefined, `the schema has more than ${limits.maxEnumValues} enum values (maxEnumValues)`);
    }
  }
  // Within maxDepth, so serializing cannot overflow the stack.
  const text = JSON.stringify(schema);
  const bytes = Buffer.byteLength(text);
  if (bytes > limits.maxBytes) {
    return fail('maxBytes', undefined, `the schema is ${bytes} bytes of JSON; the limit is ${limits.maxBytes} (maxBytes)`);
  }
  // Within maxMembers, so this walk is bounded too.
  const loop = selfReference(schema);
  if (loop !== undefined) {
    return {
      ok: false,
      violation: {
        limit: 'selfReference', at: loop,
        message: 'a reference leads back to the schema it is in without descending into the value, so validating would never end (selfReference)',
      },
    };
  }
  return { ok: true, text, patterns: found };
}

/**
 * Whether a JSON value is nested deeper than `max`, found iteratively (a value nested 20,000
 * deep is an answer a model can produce, and a recursive walk would overflow the stack on it).
 */
export function valueDepthOver(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}
