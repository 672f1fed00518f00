import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { BatonError } from '../src/lib/errors.ts';
import { OutputInvalidError, TransientError } from '../src/lib/sdk/errors.ts';
import { SchemaGuard, SchemaGuardClosedError } from '../src/lib/engine/schema/schema-guard.ts';
import { SCHEMA_LIMITS, checkSchemaLimits } from '../src/lib/engine/schema/schema-limits.ts';
import { toRe2Syntax } from '../src/lib/engine/schema/schema-regexp.ts';
import {
  EXPONENTIAL_ANYOF, RECURSIVE_SCHEMA, SELF_REFERENCES, exponentialSchema, nestedArrays, nestedSchema as nested, patternBomb,
} from './helpers/hostile-schemas.ts';

/**
 * The output schema guard on its own (no Redis): the static limits, RE2 for patterns, the
 * ajv options, and the worker thread's budget, replacement and close. What a tenant sees
 * over HTTP is in test/output-schema-abuse.test.ts.
 */
const guard = new SchemaGuard();
const opened = [guard];
afterAll(() => Promise.all(opened.map((g) => g.close())));

function another(...args: ConstructorParameters<typeof SchemaGuard>): SchemaGuard {
  const g = new SchemaGuard(...args);
  opened.push(g);
  return g;
}

async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection, got a result');
}

describe('static limits, before ajv', () => {
  const over: [keyof typeof SCHEMA_LIMITS, Record<string, unknown>][] = [
    ['maxBytes', { type: 'string', description: 'x'.repeat(SCHEMA_LIMITS.maxBytes) }],
    ['maxDepth', nested(SCHEMA_LIMITS.maxDepth + 1)],
    ['maxMembers', { type: 'object', properties: Object.fromEntries(Array.from({ length: SCHEMA_LIMITS.maxMembers }, (_, i) => [`p${i}`, {}])) }],
    ['maxPatterns', patternBomb(5_000)],
    ['maxPatternChars', { type: 'string', pattern: 'a'.repeat(SCHEMA_LIMITS.maxPatternChars + 1) }],
    ['maxEnumValues', { enum: Array.from({ length: SCHEMA_LIMITS.maxEnumValues + 1 }, (_, i) => i) }],
  ];
  for (const [limit, schema] of over) {
    it(`a schema over ${limit} is OUTPUT_SCHEMA_INVALID naming the limit`, async () => {
      const err = await rejection(guard.check(schema));
      expect(err).toBeInstanceOf(BatonError);
      expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
      expect(err.details[0].path).toMatch(/^body\.outputSchema/);
      expect(err.details[0].message).toContain(limit);
    });
  }

  it('names where a nested limit was crossed', () => {
    const r = checkSchemaLimits({ properties: { deep: nested(SCHEMA_LIMITS.maxDepth) } });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.violation.at).toMatch(/^properties\.deep\.not\.not/);
  });

  it('a schema at the limits is accepted, and a property named "pattern" or "enum" is no keyword', async () => {
    await guard.check(nested(SCHEMA_LIMITS.maxDepth));
    await guard.check({ type: 'object', properties: { pattern: { type: 'string' }, enum: { type: 'number' } } });
    const many = Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`field_${i}`, { type: 'string', maxLength: 10 }]));
    await guard.check({ type: 'object', properties: many });
  });

  it('a validated value nested deeper than maxValueDepth is refused without recursing into it', async () => {
    const text = '['.repeat(20_000) + ']'.repeat(20_000);
    const err = await rejection(guard.validate(RECURSIVE_SCHEMA, JSON.parse(text), text));
    expect(err).toBeInstanceOf(OutputInvalidError);
    expect(err.errors[0].message).toContain('maxValueDepth');
  });
});

describe('regular expressions run on RE2', () => {
  it('the ReDoS pattern answers at once: ^(a+)+$ against 10,000 a and a "!"', async () => {
    const schema = { type: 'string', pattern: '^(a+)+$' };
    await guard.check(schema);
    const err = await rejection(guard.validate(schema, `${'a'.repeat(10_000)}!`));
    expect(err).toBeInstanceOf(OutputInvalidError);
    expect(err.errors).toEqual([{ path: '/', message: 'must match pattern "^(a+)+$"' }]);
    await expect(guard.validate(schema, 'a'.repeat(10_000))).resolves.toBe('a'.repeat(10_000));
  });

  it('patternProperties and additionalProperties test keys on RE2 too', async () => {
    const schema = { type: 'object', patternProperties: { '^(a+)+$': { type: 'number' } }, additionalProperties: false };
    await expect(guard.validate(schema, { aaaa: 1 })).resolves.toEqual({ aaaa: 1 });
    const err = await rejection(guard.validate(schema, { [`${'a'.repeat(10_000)}!`]: 1 }));
    expect(err.errors[0].message).toMatch(/must NOT have additional properties/);
  });

  for (const [what, pattern] of [['a backreference', '^(a)\\1$'], ['a lookahead', '^(?=a)a$'], ['a negative lookahead', '^(?!b)a$'], ['a lookbehind', '(?<=a)b']]) {
    it(`${what} is refused at submit, naming the pattern`, async () => {
      const err = await rejection(guard.check({ type: 'object', properties: { x: { type: 'string', pattern } } }));
      expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
      expect(err.details[0].message).toContain(JSON.stringify(pattern));
      expect(err.details[0].message).toMatch(/linear-time/);
    });
  }

  it('a pattern ajv would never run (patternProperties whose schema accepts anything) is refused all the same', async () => {
    const err = await rejection(guard.check({ type: 'object', patternProperties: { '^(?!x)': {} } }));
    expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
    expect(err.details[0].message).toContain('"^(?!x)" is refused');
  });

  it('ECMA-262 \\u escapes are understood; an escaped backslash before "u" stays literal', async () => {
    await expect(guard.validate({ type: 'string', pattern: '^\\u00e9\\uD83D\\uDE00\\u{1F600}$' }, 'é😀😀')).resolves.toBe('é😀😀');
    expect(toRe2Syntax('\\\\u0041')).toBe('\\\\u0041');
    expect(toRe2Syntax('[\\u0041-\\u005A]')).toBe('[\\x{41}-\\x{5a}]');
  });
});

describe('ajv as configured', () => {
  it('required: ["constructor"] is not satisfied by what {} inherits', async () => {
    const schema = { type: 'object', required: ['constructor', 'toString'] };
    const err = await rejection(guard.validate(schema, {}));
    expect(err.errors.map((e: any) => e.message)).toEqual([
      "must have required property 'constructor'", "must have required property 'toString'",
    ]);
    await expect(guard.validate(schema, { constructor: 1, toString: 2 })).resolves.toEqual({ constructor: 1, toString: 2 });
  });

  it('draft-07 by default and 2020-12 by $schema; an unknown draft is refused', async () => {
    await expect(guard.validate({ type: 'array', items: [{ type: 'string' }], additionalItems: false }, ['a'])).resolves.toEqual(['a']);
    const pair = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', prefixItems: [{ type: 'string' }], items: false };
    await expect(guard.validate(pair, ['a'])).resolves.toEqual(['a']);
    expect(await rejection(guard.validate(pair, ['a', 1]))).toBeInstanceOf(OutputInvalidError);
    const err = await rejection(guard.check({ $schema: 'http://json-schema.org/draft-04/schema#', type: 'string' }));
    expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
  });

  it("one tenant's $id neither collides with nor resolves another's", async () => {
    const a = { type: 'object', properties: { v: { $id: 'https://shared.test/v.json', type: 'string' } } };
    const b = { type: 'object', properties: { v: { $id: 'https://shared.test/v.json', type: 'number' } } };
    await expect(guard.validate(a, { v: 'text' })).resolves.toEqual({ v: 'text' });
    await expect(guard.validate(b, { v: 1 })).resolves.toEqual({ v: 1 });
    const err = await rejection(guard.check({ $ref: 'https://shared.test/v.json' }));
    expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
  });

  it('caps the reported problems', async () => {
    const err = await rejection(guard.validate({ type: 'array', items: { type: 'string' } }, Array.from({ length: 500 }, (_, i) => i)));
    expect(err.errors).toHaveLength(51);
    expect(err.errors.at(-1).message).toBe('and 450 more errors');
  });

  it('a payload that is not JSON is refused, not thrown', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect((await rejection(guard.validate({ type: 'object' }, cyclic))).errors[0].message).toMatch(/cannot be serialized/);
    expect(await rejection(guard.validate({}, () => 1))).toBeInstanceOf(OutputInvalidError);
  });
});

describe('the worker thread', () => {
  it('a validation over budget is cut off as OUTPUT_INVALID while the event loop turns, and the next request gets a fresh thread', async () => {
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 20);
    const err = await rejection(guard.validate(exponentialSchema(40), 1)).finally(() => clearInterval(ticker));
    expect(err).toBeInstanceOf(OutputInvalidError);
    expect(err.errors[0].message).toMatch(/budget of 2000 ms/);
    // Blocked, the loop would not have ticked at all in those two seconds.
    expect(ticks).toBeGreaterThan(10);
    await expect(guard.validate({ type: 'number' }, 7)).resolves.toBe(7);
  });

  it('a compile over budget is OUTPUT_SCHEMA_INVALID (limits lifted to reach it)', async () => {
    const loose = another({ limits: { maxBytes: 1e9, maxMembers: 1e9, maxPatterns: 1e9 } });
    const err = await rejection(loose.check(patternBomb(5_000)));
    expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
    expect(err.details[0].message).toMatch(/compiling the schema took longer than its budget/);
    await loose.check({ type: 'string' });
  });

  it('a RangeError while validating deep input is the answer\'s failure, not the thread\'s end', async () => {
    const deep = another({ limits: { maxValueDepth: 1e9 } });
    const text = '['.repeat(20_000) + ']'.repeat(20_000);
    const err = await rejection(deep.validate(RECURSIVE_SCHEMA, JSON.parse(text), text));
    expect(err).toBeInstanceOf(OutputInvalidError);
    expect(err.errors[0].message).toMatch(/RangeError/);
    await expect(deep.validate({ type: 'array' }, [])).resolves.toEqual([]);
  });

  it('a request over the thread\'s memory limit is the request\'s failure', async () => {
    const small = another({ budget: { heapMb: 48, validateMs: 60_000 } });
    await small.check({ type: 'string' });
    const big = JSON.stringify(Array.from({ length: 40_000 }, (_, i) => ({ i, s: `${'x'.repeat(1000)}${i}` })));
    const err = await rejection(small.validate({ type: 'array', uniqueItems: true }, undefined, big));
    expect(err).toBeInstanceOf(OutputInvalidError);
    expect(err.errors[0].message).toMatch(/memory limit of 48 MB/);
    await expect(small.validate({ type: 'number' }, 1)).resolves.toBe(1);
  });

  it('close() is idempotent, fails pending requests as transient, and refuses later ones', async () => {
    const g = new SchemaGuard();
    await g.check({ type: 'string' });
    const pending = rejection(g.validate(exponentialSchema(40), 1));
    const first = g.close();
    expect(g.close()).toBe(first);
    await first;
    const err = await pending;
    expect(err).toBeInstanceOf(SchemaGuardClosedError);
    expect(err).toBeInstanceOf(TransientError);
    expect(await rejection(g.check({ type: 'number' }))).toBeInstanceOf(SchemaGuardClosedError);
  });
});

describe('tenants share the thread in turn', () => {
  it('requests are taken from the scopes round robin; a scope\'s submit checks beyond maxQueuedPerScope are 429 SCHEMA_CHECKS_BUSY', async () => {
    const g = another({ maxQueuedPerScope: 3 });
    await g.check({ type: 'string' }); // the thread is up: the next request starts at once
    const order: string[] = [];
    const schema = (name: string) => ({ type: 'object', description: name });
    const submitCheck = (scope: string, name: string) =>
      g.check(schema(name), { scope, bounded: true }).then(() => { order.push(name); });
    // a1 starts at once; a2..a4 wait (three, the cap); a5 and a6 are refused.
    const a = ['a1', 'a2', 'a3', 'a4', 'a5', 'a6'].map((n) => submitCheck('a', n).catch((err) => err));
    const b = ['b1', 'b2'].map((n) => submitCheck('b', n));
    // Unbounded checks (a worker's waitFor schemas) queue past the cap.
    const unbounded = Array.from({ length: 5 }, (_, i) => g.check(schema(`w${i}`), { scope: 'a' }));
    const refused = await Promise.all(a.slice(4));
    for (const err of refused) {
      expect(err).toBeInstanceOf(BatonError);
      expect([err.code, err.retryAfterMs]).toEqual(['SCHEMA_CHECKS_BUSY', g.budget.compileMs]);
      expect(err.details[0].path).toBe('body.outputSchema');
    }
    await Promise.all([...a.slice(0, 4), ...b, ...unbounded]);
    // b's checks are served between a's, not after all of them.
    expect(order).toEqual(['a1', 'a2', 'b1', 'a3', 'b2', 'a4']);
  });
});

describe('a schema that refers back to itself', () => {
  for (const [what, schema] of SELF_REFERENCES) {
    it(`${what}: refused before ajv, naming selfReference and where`, async () => {
      const err = await rejection(guard.check(schema));
      expect(err.code).toBe('OUTPUT_SCHEMA_INVALID');
      expect(err.details[0].message).toMatch(/leads back to the schema it is in.*\(selfReference\)$/);
      expect(err.details[0].path).toMatch(/^body\.outputSchema\..*\$ref|^body\.outputSchema\..*(allOf|not|if)/);
      // The same at validation (a schema stored before this check): the answer's failure, not a RangeError.
      const invalid = await rejection(guard.validate(schema, 'x', undefined, '', { label: 'the schema of wait:x:1' }));
      expect(invalid).toBeInstanceOf(OutputInvalidError);
      expect(invalid.errors[0].message).toMatch(/^the schema of wait:x:1 is over a limit: .*selfReference/);
    });
  }

  it('recursion that goes into the value is no self-reference, nor is a $ref in data or a chain without a loop', async () => {
    const tree = { $defs: { node: { type: 'object', properties: { children: { type: 'array', items: { $ref: '#/$defs/node' } } } } }, $ref: '#/$defs/node' };
    const chain = { definitions: { a: { allOf: [{ $ref: '#/definitions/b' }] }, b: { type: 'string' } }, $ref: '#/definitions/a' };
    for (const schema of [RECURSIVE_SCHEMA, EXPONENTIAL_ANYOF, tree, chain, { default: { $ref: '#/default' } }, exponentialSchema(3)]) {
      expect(checkSchemaLimits(schema).ok, JSON.stringify(schema)).toBe(true);
    }
    await expect(guard.validate(tree, { children: [{ children: [] }] })).resolves.toEqual({ children: [{ children: [] }] });
  });
});

describe('requests nobody waits for any more', () => {
  it('leave the queue when their signal aborts, the running one is stopped, and the next scope waits for neither', async () => {
    // How each request the guard started or queued ended, in order.
    const ended: string[] = [];
    const g = another({ events: { ended: (_op, how) => ended.push(how) } });
    await g.check({ type: 'string' }); // the thread is up
    const gone = new AbortController();
    const hostile = Array.from({ length: 6 }, () =>
      g.validate(EXPONENTIAL_ANYOF, nestedArrays(23), undefined, 'a', { bounded: true, signal: gone.signal }).then(() => 'validated', (err) => err));
    await sleep(300);
    expect(g.queued('a')).toBe(5);
    gone.abort();
    // All six answer at once (settled within the turn): five never ran, the running one was
    // stopped with its thread.
    expect(g.queued('a')).toBe(0);
    let answered = 0;
    for (const p of hostile) void p.then(() => answered++);
    await new Promise((resolve) => setImmediate(resolve));
    expect(answered).toBe(6);
    for (const out of await Promise.all(hostile)) expect([out.code, out.message]).toEqual(['CLIENT_CLOSED', expect.stringMatching(/went away/)]);
    // Another scope's request waits for a fresh thread only, not for any of the six (each would
    // take a budget): none of them ran on, none ran out its budget.
    await expect(g.validate({ type: 'number' }, 1, undefined, 'b')).resolves.toBe(1);
    expect(ended).toEqual(['passed', ...Array(6).fill('gone'), 'passed']);
  });

  it('a request whose signal aborted already is not queued at all', async () => {
    const g = another();
    const err = await rejection(g.check({ type: 'object', description: 'never compiled' }, { scope: 'a', bounded: true, signal: AbortSignal.abort() }));
    expect(err.code).toBe('CLIENT_CLOSED');
    expect(g.queued('a')).toBe(0);
  });

  it("a resume's validations are bounded per scope too: 429 SCHEMA_CHECKS_BUSY naming the value, other scopes unaffected", async () => {
    const g = another({ maxQueuedPerScope: 2 });
    await g.check({ type: 'string' });
    const gone = new AbortController();
    const resume = (scope: string) =>
      g.validate(EXPONENTIAL_ANYOF, nestedArrays(23), undefined, scope, { bounded: true, signal: gone.signal })
        .then((v): any => v, (err): any => err);
    // One runs, two wait, the fourth is refused; scope b still gets in.
    const a = [resume('a'), resume('a'), resume('a')];
    await sleep(50);
    const refused = await resume('a');
    expect([refused.code, refused.retryAfterMs, refused.details[0].path]).toEqual(['SCHEMA_CHECKS_BUSY', g.budget.validateMs, 'body.value']);
    expect(refused.details[0].message).toMatch(/SCHEMA_CHECKS_PER_SCOPE/);
    const b = resume('b');
    expect(g.queued('b')).toBe(1);
    gone.abort();
    for (const out of await Promise.all([...a, b])) expect(out.code).toBe('CLIENT_CLOSED');
  });
});
