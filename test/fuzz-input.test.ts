import { request } from 'node:http';
import fc from 'fast-check';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { ERROR_CODES } from '../src/lib/contract/errors.ts';
import { ownRedis, useHarness, type Harness } from './helpers/harness.ts';
import {
  EXPONENTIAL_ANYOF, exponentialSchema, nestedSchema, patternBomb, RECURSIVE_SCHEMA, REDOS_SCHEMA, SELF_REFERENCES,
} from './helpers/hostile-schemas.ts';
import { call } from './helpers/http.ts';
import { keySpaceOf } from './helpers/key-space.ts';

// Each property makes hundreds of requests, one after another: on a 2-core machine running
// other suites beside this one a property ran 61 s against the 60 s default.
vi.setConfig({ testTimeout: 180_000 });

/**
 * Invariant 10 under generated input: for every route of /openapi.json, malformed params,
 * queries, headers and bodies never get a 5xx, always get a registered error code with its
 * registered status, and a rejected request leaves Redis byte for byte as it was. The
 * bodies include nesting far past BODY_MAX_DEPTH, bytes that are not UTF-8, and requests
 * carry repeated headers. The same for generated output schemas on submit: accepted, or
 * refused with a registered code.
 *
 * No worker runs and the API's sweeper is off, so nothing but the requests writes to Redis.
 * The submit rate limit is off here (its bucket is written by well-formed submits that end
 * in a 409, which is not bad input); test/tenancy-rate-limit.test.ts covers it.
 */
let h: Harness;
let host: string;
let port: number;
let key: string;
let operator: string;
let routes: { method: string; path: string; params: string[]; access: string }[];

const RUNS = Number(process.env.FUZZ_RUNS ?? 300);
const SCHEMA_RUNS = Number(process.env.FUZZ_SCHEMA_RUNS ?? 200);
const NESTING_RUNS = Number(process.env.FUZZ_NESTING_RUNS ?? 100);

beforeAll(async () => {
  // No fair-share pass either: its lock key comes and goes every interval, written by no request.
  // Its own Redis, whose writes it counts (key-space.ts): a refusal is checked against the
  // count, and against a walk of the key space when the count moved.
  h = await useHarness({
    REDIS_URL: await ownRedis(), SWEEP_INTERVAL_MS: '0', FAIR_SHARE_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0', BODY_LIMIT_BYTES: '8192', RATE_LIMITS: 'fuzz:bucket=rpm:10',
    SCHEDULE_POLL_MS: '0', BULK_POLL_MS: '0',
  });
  await watchWrites();
  const api = await h.startApi();
  const u = new URL(api.url);
  host = u.hostname;
  port = Number(u.port);
  key = await h.key('acme', 'admin');
  operator = await h.operatorKey();
  const doc = (await call(api.url, 'GET', '/openapi.json')).body;
  routes = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
    Object.entries(ops).map(([method, op]) => ({
      method: method.toUpperCase(),
      path,
      params: [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]),
      access: op['x-baton-access'],
    })),
  );
  expect(routes.length).toBeGreaterThan(10);
});

const { snapshot, expectUnchanged, expectUnchangedSince, watchWrites } = keySpaceOf(() => h);

interface RawResponse { status: number; text: string; headers: Record<string, string | string[] | undefined> }

/**
 * A raw HTTP request: no client-side normalisation of the path, headers or body. Headers in
 * the raw form (name, value, name, value...) may repeat a name.
 */
function send(
  method: string, path: string, headers: Record<string, string> | string[], body: string | Buffer | undefined,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request({ host, port, method, path, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      // An SSE stream that opened would never end by itself: a valid events request is not
      // malformed input, so stop reading after the first bytes.
      if (String(res.headers['content-type']).startsWith('text/event-stream')) {
        res.destroy();
        return resolve({ status: res.statusCode!, text: '', headers: res.headers });
      }
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode!, text, headers: res.headers }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** A well-formed POST with an API key to an API at `target`, read to its end. */
function post(
  target: { host: string; port: number }, apiKey: string, path: string, body: string | Buffer, type: string,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request({ ...target, method: 'POST', path, agent: false, headers: {
      authorization: `Bearer ${apiKey}`, 'content-type': type, 'content-length': String(Buffer.byteLength(body)),
    } }, (r) => {
      let text = '';
      r.setEncoding('utf8');
      r.on('data', (c) => { text += c; });
      r.on('end', () => resolve({ status: r.statusCode!, text, headers: r.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

// ---- generators ---------------------------------------------------------------------

const VALID: Record<string, string> = {
  scope: 'acme', runId: 'rmissing0000000000', sessionId: 's1', runtimeId: 'default', stepKey: 'step:charge:1',
  waitKey: 'wait:approve:1', token: `bwt_acme.${'x'.repeat(43)}`, bucket: 'fuzz:bucket', scheduleId: 'schmissing0000',
  chatId: 'c1', responseId: 'resp_rmissing0000000000',
};
const PARAMS = ['scope', 'runId', 'sessionId', 'runtimeId', 'stepKey', 'waitKey', 'token', 'bucket', 'scheduleId', 'chatId', 'responseId'];

/** The OpenAI-compatible routes answer errors in OpenAI's shape (docs/openai-api.md). */
const isOpenAi = (path: string) => path.startsWith('/v1/responses') || path.startsWith('/v1/chat/completions');

/** An OpenAI error: `{ error: { message, type, param, code } }`, with a status OpenAI's SDKs map to their own classes. */
function expectOpenAiError(status: number, text: string, what: string): string {
  const error = (JSON.parse(text) as { error: { message: unknown; type: unknown; param: unknown; code: unknown } }).error;
  expect([400, 401, 403, 404, 409, 429], what).toContain(status);
  expect(error.message, what).toBeTypeOf('string');
  expect(error.type, what).toBeTypeOf('string');
  expect(error.param === null || typeof error.param === 'string', what).toBe(true);
  expect(error.code === null || typeof error.code === 'string', what).toBe(true);
  return `openai:${String(error.code)}`;
}

/** A path segment: mostly hostile, sometimes valid, already safe to put in a request line. */
const segment = (name: string) =>
  fc.oneof(
    { weight: 2, arbitrary: fc.constant(VALID[name] ?? 'x') },
    { weight: 3, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).map(encodeURIComponent) },
    { weight: 2, arbitrary: fc.constantFrom('a{b}', 'a:b', '..', '-lead', 'x'.repeat(65), '%7Bx%7D', '%3A', 'a%00b', '%E2%80%AE') },
    // Broken percent-encoding: the router cannot decode it.
    { weight: 1, arbitrary: fc.constantFrom('%', '%zz', '%E0%A4%A', 'ok%') },
  );

const queryString = fc.oneof(
  fc.constant(''),
  fc.dictionary(fc.string({ maxLength: 12 }), fc.string({ maxLength: 30 }), { maxKeys: 4 })
    .map((d) => new URLSearchParams(d).toString()),
  fc.constantFrom(
    'limit=0', 'limit=abc', 'limit=1e9', 'limit=-1', 'cursor=%zz', 'status=running,nope', 'after=1-x', 'after=',
    'sessionId=a:b', 'rerunOf=a{b}', 'rerunOf=', 'rerunOf=' + 'r'.repeat(65), 'limit=5&limit=6', 'unknown=1', 'cursor=' + '9'.repeat(40), 'status=',
    // The steps and usage pages' cursors: an offset, and `<day>.<row>`.
    'limit=1&cursor=1', 'cursor=-1', 'limit=1001', 'limit=1&cursor=1_sch0', 'cursor=1_', 'from=2024-01-01&to=2024-01-02&cursor=2024-02-30.1',
    'from=2024-01-01&to=2024-01-02&cursor=2024-01-01.x', 'from=2024-01-01&to=2024-01-02&limit=0',
  ),
);

const validSubmit = { sessionId: 's1', input: { content: 'hello' } };

/** Arrays nested `n` deep, as JSON text (JSON.stringify cannot build thousands of levels on a test's stack). */
const nestedText = (n: number) => `${'['.repeat(n)}0${']'.repeat(n)}`;

/** Any-JSON fields nested around and far past BODY_MAX_DEPTH (well-formed submits otherwise). */
const deepBody = fc.record({
  field: fc.constantFrom('memory', 'metadata', 'outputSchema', 'value', 'input'),
  // Up to 4,000 levels: deeper would pass the 8 KiB body limit of this file and test that instead.
  depth: fc.oneof(fc.integer({ min: 100, max: 140 }), fc.integer({ min: 1_000, max: 4_000 })),
  close: fc.boolean(),
}).map(({ field, depth, close }) => {
  const value = field === 'metadata' || field === 'outputSchema' || field === 'input' ? `{"a":${nestedText(depth)}}` : nestedText(depth);
  // Unclosed: malformed as well as deep, which the nesting check must not mistake for well-formed.
  const text = `{"sessionId":"s1","input":{"content":"hello"},"${field}":${value}}`;
  return close ? text : text.slice(0, text.length - depth);
});

/** A valid submit with one byte that is not UTF-8 (a lone lead or continuation byte, an overlong form). */
const notUtf8 = fc.record({
  at: fc.nat(40),
  bytes: fc.constantFrom([0xff], [0xe9], [0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80]),
}).map(({ at, bytes }) => {
  const text = Buffer.from(JSON.stringify(validSubmit));
  const i = text.indexOf('hello') + (at % 5);
  return Buffer.concat([text.subarray(0, i), Buffer.from(bytes), text.subarray(i)]);
});

/** Bodies: JSON of any shape, valid bodies with one field broken, and text that is not JSON. */
const jsonBody = fc.oneof<fc.Arbitrary<string | Buffer>[]>(
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  deepBody,
  notUtf8,
  fc.record({
    field: fc.constantFrom('sessionId', 'input', 'runtime', 'agent', 'metadata', 'memory', 'maxAttempts', 'idempotencyKey',
      'multitask', 'outputSchema', 'cancelQueued', 'value', 'rerun', 'extra', 'runAt', 'delayMs', 'ttlMs', 'timeoutMs',
      'maxActive', 'maxActivePerKey', 'submitRatePerSec', 'weight', 'tokensPerDay', 'priority', 'concurrencyKey', 'onBudget',
      'fromStep', 'allowNonIdempotent', 'atTurn', 'atRunId', 'awaitAgent', 'messageId'),
    value: fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constant(null), fc.string({ minLength: 300_000, maxLength: 300_001 })),
  }).map(({ field, value }) => JSON.stringify({ ...validSubmit, [field]: value })),
  fc.constantFrom(
    '{', '{"a":', 'nul', '[1,2', '"\\uZZZZ"', '{"sessionId":"s1","input":{"content":""}}', '{"memory":null}',
    JSON.stringify({ ...validSubmit, memory: null }), JSON.stringify({ ...validSubmit, input: { content: 'x', role: 'system' } }),
    JSON.stringify({ ...validSubmit, metadata: Object.fromEntries(Array.from({ length: 70 }, (_, i) => [`k${i}`, i])) }),
    JSON.stringify({ ...validSubmit, outputSchema: { type: 12 } }), JSON.stringify({ cancelQueued: 'yes' }),
    JSON.stringify({ value: 1, rerun: true }), 'x'.repeat(9000), JSON.stringify({ value: { approved: 'yes' } }), '{"value":null}',
    JSON.stringify({ ...validSubmit, runAt: '2020-01-01T00:00:00Z', delayMs: 5 }), JSON.stringify({ ...validSubmit, delayMs: 5, multitask: 'interrupt' }),
    JSON.stringify({ fromStep: 'tool:charge:1', allowNonIdempotent: 'yes' }), JSON.stringify({ atTurn: 0 }), JSON.stringify({ atTurn: 2, atRunId: 'r1' }),
    // Steering: a message id without steer, with a key, malformed; steer with what it refuses.
    JSON.stringify({ ...validSubmit, messageId: 'm-1' }), JSON.stringify({ ...validSubmit, multitask: 'steer', messageId: '{m}' }),
    JSON.stringify({ ...validSubmit, multitask: 'steer', idempotencyKey: 'k-1' }), JSON.stringify({ ...validSubmit, multitask: 'steer', ttlMs: 5 }),
    JSON.stringify({ ...validSubmit, multitask: 'steer', messageId: 'm'.repeat(129) }),
  ),
);

const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8') },
  { weight: 1, arbitrary: fc.constantFrom('application/json; charset=latin1', 'text/plain', 'application/x-www-form-urlencoded',
    'application/json; charset=utf-16', undefined) },
);

const auth = fc.oneof(
  { weight: 6, arbitrary: fc.constant('valid') },
  // An operator key: refused on a tenant's routes, the only key a scope's limits take.
  { weight: 2, arbitrary: fc.constant('operator') },
  // Two Authorization headers: the valid key twice, or with another value before or after it.
  { weight: 1, arbitrary: fc.constantFrom('twice', 'twice:first-bad', 'twice:second-bad') },
  { weight: 1, arbitrary: fc.constantFrom('', 'Bearer', 'Bearer short', 'Basic abc', 'Bearer ' + 'k'.repeat(300), 'bearer x') },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }).map((s) => `Bearer ${s.replace(/[^\x21-\x7e]/g, 'z')}`) },
);

const extraHeaders = fc.record({
  'last-event-id': fc.option(fc.constantFrom('0', 'abc', '1-2-3', '-1', '9'.repeat(30), '1-'), { nil: undefined }),
  // A submit that asks for its event stream must refuse bad input just as a JSON one does.
  accept: fc.option(fc.constantFrom('text/event-stream', 'application/json', '*/*', 'text/event-stream;q=0.1, application/json'), { nil: undefined }),
  'content-encoding': fc.oneof(
    { weight: 8, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.constantFrom('gzip', 'br', 'identity', 'zip') },
  ),
});

/** Regular expressions: mostly ordinary, some catastrophic for a backtracking engine or beyond RE2. */
const patternText = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('^[a-z0-9_-]{3,16}$', '\\d{3}-\\d{4}', '\\p{L}+', '\\u00e9+', '(?<name>a)', '', '.*', '^(a+)+$', '(x+x+)+y') },
  { weight: 2, arbitrary: fc.constantFrom('(a)\\1', '(?=a)', '(?<!a)b', '[', '^[^]$', '\\cA', 'a{2,1001}') },
  { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
);

/**
 * JSON-Schema-shaped objects, made of real keywords with values mostly of the right type,
 * sometimes of the wrong one: what a careless or hostile tenant sends as `outputSchema`. An object has one
 * keyword holding subschemas and at most four levels: a handful of nodes, so the bodies stay
 * within this file's BODY_LIMIT_BYTES and generating them stays cheap.
 */
/** Mostly `good`, one time in `1 + weight` a value of the wrong type. */
const mostly = <T, U>(good: fc.Arbitrary<T>, bad: fc.Arbitrary<U>, weight = 12) =>
  fc.oneof({ weight, arbitrary: good }, { weight: 1, arbitrary: bad });

const scalarKeywords = fc.record(
  {
    type: mostly(fc.oneof(fc.constantFrom('string', 'number', 'integer', 'boolean', 'null', 'object', 'array'), fc.constant(['string', 'null'])),
      fc.oneof(fc.constant('nope'), fc.integer())),
    required: mostly(fc.array(fc.constantFrom('a', 'constructor', '__proto__', 'toString', ''), { maxLength: 3 }), fc.string({ maxLength: 4 })),
    pattern: mostly(patternText, fc.integer()),
    enum: mostly(fc.array(fc.jsonValue({ maxDepth: 1 }), { minLength: 1, maxLength: 4 }), fc.constant('x')),
    const: fc.jsonValue({ maxDepth: 1 }),
    minLength: mostly(fc.nat(5), fc.constantFrom(-1, '3')),
    format: fc.constantFrom('email', 'date-time', 'regex', 'nope'),
    $id: fc.constantFrom('https://shared.test/s.json', 'relative.json', 'urn:x:y'),
  },
  { requiredKeys: [] },
);

const schemaShapes = fc.letrec<{ node: unknown; object: Record<string, unknown> }>((tie) => ({
  node: fc.oneof(
    { maxDepth: 4, depthIdentifier: 'outputSchema', depthSize: 'small' },
    fc.oneof(
      scalarKeywords,
      fc.boolean(),
      fc.record({ $ref: fc.constantFrom('#', '#/definitions/a', '#/$defs/a', '#/nope', 'https://example.invalid/s.json', 'other.json#x') }),
    ),
    tie('object'),
  ),
  object: fc.tuple(
    scalarKeywords,
    fc.oneof(
      fc.record({ properties: fc.dictionary(fc.string({ maxLength: 8 }), tie('node'), { maxKeys: 3 }) }),
      fc.record({ patternProperties: fc.dictionary(patternText, tie('node'), { maxKeys: 2 }), additionalProperties: fc.boolean() }),
      fc.record({ additionalProperties: tie('node') }),
      fc.record({ items: tie('node') }),
      fc.record({ prefixItems: fc.array(tie('node'), { maxLength: 2 }) }),
      fc.record({ allOf: fc.array(tie('node'), { maxLength: 2 }) }),
      fc.record({ anyOf: fc.array(tie('node'), { maxLength: 2 }) }),
      fc.record({ not: tie('node') }),
      fc.record({ definitions: fc.dictionary(fc.constantFrom('a', 'b'), tie('node'), { maxKeys: 2 }), $ref: fc.constant('#/definitions/a') }),
      fc.record({ $defs: fc.dictionary(fc.constantFrom('a', 'b'), tie('node'), { maxKeys: 2 }) }),
    ),
  ).map(([scalars, nested]) => ({ ...scalars, ...nested })),
}));

/** A root `outputSchema`: generated shapes under any `$schema`, now and then one of the report's hostile schemas. */
const outputSchemaArb = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.tuple(
      schemaShapes.object,
      fc.oneof(
        { weight: 6, arbitrary: fc.constant(undefined) },
        { weight: 2, arbitrary: fc.constantFrom('http://json-schema.org/draft-07/schema#', 'https://json-schema.org/draft/2020-12/schema') },
        { weight: 1, arbitrary: fc.constantFrom('http://json-schema.org/draft-04/schema#', 'nope') },
      ),
    ).map(([schema, $schema]) => ($schema === undefined ? schema : { ...schema, $schema })),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom<Record<string, unknown>>(
      REDOS_SCHEMA, RECURSIVE_SCHEMA, exponentialSchema(40), patternBomb(100), nestedSchema(80),
      { type: 'string', pattern: 'a'.repeat(1_001) }, { type: 'object', required: ['constructor'] }, EXPONENTIAL_ANYOF,
      ...SELF_REFERENCES.map(([, schema]) => schema),
    ),
  },
);

const malformedRequest = () =>
  fc.record({
    route: fc.constantFrom(...routes),
    params: fc.dictionary(fc.constantFrom(...PARAMS), fc.constant(true)).chain((broken) =>
      fc.record(Object.fromEntries(
        PARAMS.map((p) => [p, broken[p] ? segment(p) : fc.constant(VALID[p])]),
      ) as Record<string, fc.Arbitrary<string>>),
    ),
    query: queryString,
    body: fc.oneof({ weight: 1, arbitrary: fc.constant(undefined) }, { weight: 3, arbitrary: jsonBody }),
    contentType,
    auth,
    headers: extraHeaders,
  });

// ---- the property -------------------------------------------------------------------

describe('generated malformed requests to every route', () => {
  it('never answer 5xx, always carry a registered code, and a rejection writes nothing', async () => {
    let baseline = await snapshot();
    const seen = new Map<string, number>();
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(malformedRequest(), async (r) => {
        const path = r.route.path.replace(/\{(\w+)\}/g, (_, p: string) => r.params[p] ?? VALID[p]) + (r.query ? `?${r.query}` : '');
        const headers: Record<string, string> = {};
        if (r.auth === 'valid' || r.auth.startsWith('twice')) headers.authorization = `Bearer ${key}`;
        else if (r.auth === 'operator') headers.authorization = `Bearer ${operator}`;
        else if (r.auth) headers.authorization = r.auth;
        if (r.headers['last-event-id'] !== undefined) headers['last-event-id'] = r.headers['last-event-id'];
        if (r.headers.accept !== undefined) headers.accept = r.headers.accept;
        if (r.body !== undefined) {
          if (r.contentType) headers['content-type'] = r.contentType;
          if (r.headers['content-encoding']) headers['content-encoding'] = r.headers['content-encoding'];
          headers['content-length'] = String(Buffer.byteLength(r.body));
        }
        // In the raw form Node adds no Host header of its own.
        const raw = ['host', `${host}:${port}`, ...Object.entries(headers).flat()];
        // The second Authorization header comes after all the others, as a proxy would append it.
        if (r.auth === 'twice') raw.push('Authorization', `Bearer ${key}`);
        if (r.auth === 'twice:second-bad') raw.push('Authorization', 'Bearer not-the-key-0000000');
        if (r.auth === 'twice:first-bad') raw.unshift('authorization', 'Bearer not-the-key-0000000');
        const res = await send(r.route.method, path, raw, r.body);
        const what = `${r.route.method} ${path} ${JSON.stringify(raw)} body=${String(r.body?.slice(0, 200))} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status < 400) {
          // Well-formed after all (e.g. a valid list query): not a rejection, so it may write.
          accepted++;
          baseline = await snapshot();
          return;
        }
        if (isOpenAi(path)) {
          const code = expectOpenAiError(res.status, res.text, what);
          seen.set(code, (seen.get(code) ?? 0) + 1);
          await expectUnchangedSince(baseline, what);
          return;
        }
        const body = JSON.parse(res.text) as { error: { code: keyof typeof ERROR_CODES; message: string; details: unknown[] } };
        expect(Object.keys(ERROR_CODES), what).toContain(body.error.code);
        expect(ERROR_CODES[body.error.code].status, what).toBe(res.status);
        expect(body.error.message, what).toBeTypeOf('string');
        expect(Array.isArray(body.error.details), what).toBe(true);
        seen.set(body.error.code, (seen.get(body.error.code) ?? 0) + 1);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
    console.log(`${RUNS} generated requests: ${accepted} well-formed after all; rejections by code:`, Object.fromEntries(seen));
    expect(seen.get('VALIDATION_FAILED')).toBeGreaterThan(0);
  });
});

/** A limit's value: mostly one in its range (edges included), else past them, of the wrong type, or null. */
const limitValue = (min: number, max: number, o: { integer?: boolean; none?: boolean } = {}) => fc.oneof(
  { weight: 6, arbitrary: o.integer === false ? fc.double({ min, max, noNaN: true }) : fc.integer({ min, max }) },
  { weight: 2, arbitrary: fc.constantFrom(min, max, ...(o.none ? [null] : [])) },
  { weight: 1, arbitrary: fc.constantFrom(min - 1, max + 1, min / 2, 1.5, -1, null, '3', true, [], {}, Number.MAX_SAFE_INTEGER) },
);

/** PUT …/limits bodies: any subset of the limits, each value generated; now and then a field that is no limit. */
const limitsBody = fc.tuple(fc.record({
  maxActive: limitValue(1, 100_000), maxActivePerKey: limitValue(1, 100_000, { none: true }),
  submitRatePerSec: limitValue(0.001, 1_000_000, { integer: false }), submitBurst: limitValue(1, 1_000_000),
  weight: limitValue(1, 1_000), maxStreams: limitValue(1, 1_000_000), tokensPerDay: limitValue(1, 1e12, { none: true }),
  readBytesPerSec: limitValue(1, 1024 ** 4), readBurstBytes: limitValue(1, 1024 ** 4),
}, { requiredKeys: [] }), fc.nat(9)).map(([body, n]) => (n === 0 ? { ...body, priority: 5 } : body));

describe('generated limit bodies from an operator key', () => {
  it('are stored as sent, or refused 400 VALIDATION_FAILED naming each failing field, and a refusal writes nothing', async () => {
    let baseline = await snapshot();
    let accepted = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(limitsBody, async (body) => {
        const text = JSON.stringify(body);
        const res = await send('PUT', '/v1/scopes/limited/limits', {
          authorization: `Bearer ${operator}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)),
        }, text);
        const what = `${text} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status === 200) {
          accepted++;
          // What was sent is what is set: every field, none dropped or changed.
          expect(JSON.parse(res.text).set, what).toEqual(JSON.parse(text));
          baseline = await snapshot();
          return;
        }
        refused++;
        expectBodyRefusal(res.text, what);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: Math.min(RUNS, 200), endOnFailure: true },
    );
    console.log(`generated limit bodies: ${accepted} stored, ${refused} refused`);
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });
});

/** A generated body's refusal: 400 VALIDATION_FAILED naming at least one field, each of the body. */
function expectBodyRefusal(text: string, what: string): void {
  const error = (JSON.parse(text) as { error: { code: string; details: { path: string }[] } }).error;
  expect(error.code, what).toBe('VALIDATION_FAILED');
  expect(error.details.length, what).toBeGreaterThan(0);
  for (const d of error.details) expect(d.path, what).toMatch(/^body(\.|$)/);
}

/** Mostly one of `good`, sometimes one of `bad`. */
const mostlyOf = <T, U>(good: T[], bad: U[]) => mostly(fc.constantFrom(...good), fc.constantFrom(...bad), 6);

/** A chat part: a text part mostly, an approval answer, or parts of the wrong shape. */
const chatPart = fc.oneof(
  { weight: 6, arbitrary: fc.record({ type: fc.constant('text'), text: mostlyOf(['hello', 'a b c'], ['', 7, null]) }) },
  { weight: 1, arbitrary: fc.record({
    type: fc.constant('dynamic-tool'), state: mostlyOf(['approval-responded'], ['x'.repeat(65)]),
    approval: mostlyOf([{ id: 'rmissing0000000000/wait:approve:1', approved: true }, { id: 'x', approved: false, reason: 'no' }], [{ approved: true }, null]),
  }) },
  { weight: 1, arbitrary: fc.constantFrom({}, null, 'text', { type: 1 }, { type: 'text', text: 't'.repeat(300_000) }) },
);

/** POST …/chat bodies as DefaultChatTransport sends them, with fields missing, of the wrong type, or unknown. */
const chatBody = fc.record({
  id: mostlyOf(['fz-chat', 'c-1'], ['', '{x}', 'a:b', 7]),
  messages: mostly(fc.array(fc.record({
    id: mostlyOf(['m1', 'm2'], [3, 'x'.repeat(300)]),
    role: mostlyOf(['user', 'assistant'], ['tool', 'robot']),
    parts: mostly(fc.array(chatPart, { maxLength: 3 }), fc.constantFrom(null, 'text', [[]]), 6),
  }, { requiredKeys: ['id', 'role', 'parts'] }), { maxLength: 3 }), fc.constantFrom(null, {}, 'hi'), 6),
  trigger: mostlyOf(['submit-message', 'regenerate-message'], ['resume-stream', '', null]),
  messageId: mostlyOf(['rmissing0000000000', 'm1'], [5, 'x'.repeat(300)]),
  agent: mostlyOf(['echo'], ['{x}', 3]),
  runtime: mostlyOf(['fz-none'], ['../x']),
  metadata: mostlyOf([{ a: 1 }], [[], 'm']),
  extra: mostlyOf([undefined], ['a field DefaultChatTransport does not send']),
}, { requiredKeys: ['id', 'messages', 'trigger'] });

const VALID_CHAT = { id: 'fz-chat', messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'hello' }] }], trigger: 'submit-message' };

describe('generated chat bodies', () => {
  it('stream a turn, or are refused 4xx with a registered code (400 naming a body field), and a refusal writes nothing', async () => {
    let baseline = await snapshot();
    let accepted = 0;
    const refused = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(fc.oneof({ weight: 1, arbitrary: fc.constant(VALID_CHAT) }, { weight: 4, arbitrary: chatBody }), async (body) => {
        const text = JSON.stringify(body);
        const res = await send('POST', '/v1/scopes/acme/chat', {
          authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)),
        }, text);
        const what = `${text.slice(0, 400)} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status === 200) {
          accepted++;
          expect(res.headers['x-vercel-ai-ui-message-stream'], what).toBe('v1');
          baseline = await snapshot();
          return;
        }
        const error = (JSON.parse(res.text) as { error: { code: keyof typeof ERROR_CODES } }).error;
        refused.set(error.code, (refused.get(error.code) ?? 0) + 1);
        expect(ERROR_CODES[error.code].status, what).toBe(res.status);
        if (error.code === 'VALIDATION_FAILED') expectBodyRefusal(res.text, what);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: Math.min(RUNS, 200), endOnFailure: true },
    );
    console.log(`generated chat bodies: ${accepted} streamed; refusals by code:`, Object.fromEntries(refused));
    expect(accepted).toBeGreaterThan(0);
    expect(refused.get('VALIDATION_FAILED')).toBeGreaterThan(0);
  });
});

/** POST …/runs/cancel and …/runs/rerun bodies: filters mostly whole, some empty, of unknown fields or bad values. */
const bulkBody = fc.record({
  filter: fc.oneof(
    { weight: 6, arbitrary: fc.record({
      status: mostlyOf([['failed'], ['cancelled', 'failed'], ['queued'], ['succeeded']], [[], ['dispatched'], ['nope'], 'queued', null]),
      agent: mostlyOf(['echo', 'triage'], ['', '{x}', 'a'.repeat(200)]),
      runtime: mostlyOf(['default', 'rt-1'], ['../x']),
      sessionId: mostlyOf(['fz', 's-1'], [' ']),
      concurrencyKey: mostlyOf(['user:1', 'k'], ['', 'no spaces allowed']),
      createdBefore: mostlyOf(['2026-01-01T00:00:00Z', '2030-12-31T23:59:59.999+02:00'], ['yesterday', '2026-13-01T00:00:00Z', 0]),
      createdAfter: mostlyOf(['2020-01-01T00:00:00Z'], ['now', '']),
    }, { requiredKeys: [] }) },
    { weight: 1, arbitrary: fc.constantFrom({}, null, [], 'all', { agent: 'echo', agentt: 'echo' }) },
  ),
  allowNonIdempotent: mostlyOf([true, false], ['yes']),
}, { requiredKeys: ['filter'] });

describe('generated bulk bodies from an admin key', () => {
  it('make a running operation, or are refused 400 VALIDATION_FAILED naming a body field, and a refusal writes nothing', async () => {
    let baseline = await snapshot();
    let accepted = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('cancel', 'rerun'), bulkBody, async (kind, body) => {
        const text = JSON.stringify(body);
        const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) };
        const res = await send('POST', `/v1/scopes/acme/runs/${kind}`, headers, text);
        const what = `${kind} ${text} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status === 202) {
          accepted++;
          const made = JSON.parse(res.text) as { id: string; status: string; kind: string };
          expect(made, what).toMatchObject({ status: 'running', kind });
          // Stopped again, so the scope never reaches its cap of running operations.
          const stop = await send('POST', `/v1/scopes/acme/operations/${made.id}/cancel`, { ...headers, 'content-length': '2' }, '{}');
          expect(stop.status, what).toBe(200);
          baseline = await snapshot();
          return;
        }
        refused++;
        expectBodyRefusal(res.text, what);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: Math.min(RUNS, 200), endOnFailure: true },
    );
    console.log(`bulk bodies: ${accepted} accepted, ${refused} refused`);
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });
});

/** A cron field: mostly one croner reads, else out of range, malformed or hostile. */
const cronField = fc.oneof(
  { weight: 20, arbitrary: fc.constantFrom('*', '0', '*/5', '1-5', '0,30', '*/1') },
  { weight: 1, arbitrary: fc.constantFrom('61', '-1', '*/0', '1-', ',', '99999999999', '*/-3', 'L-40', '#', '\u0000', 'a'.repeat(300)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
);

/** POST …/schedules bodies: expressions of 0-8 fields or a nickname, time zones real or not, templates whole or not. */
const scheduleBody = fc.record({
  cron: fc.oneof(
    { weight: 6, arbitrary: fc.array(cronField, { minLength: 5, maxLength: 6 }).map((f) => f.join(' ')) },
    { weight: 1, arbitrary: fc.array(cronField, { minLength: 0, maxLength: 8 }).map((f) => f.join(' ')) },
    { weight: 1, arbitrary: fc.constantFrom('@hourly', '@yearly', '@every', '@reboot', '0 0 30 2 *', '* * * * * *') },
  ),
  timezone: fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom('UTC', 'Europe/Paris', 'Asia/Kathmandu', 'Etc/GMT+14') },
    { weight: 1, arbitrary: fc.constantFrom('Mars/Olympus', '', 'utc', '../../etc') },
    { weight: 1, arbitrary: fc.string({ maxLength: 70 }) },
  ),
  missed: fc.constantFrom('skip', 'catchUpOne', 'skip', 'catchUpOne', 'all', 1),
  run: fc.oneof(
    { weight: 4, arbitrary: fc.constant({ sessionId: 'fz', input: { content: 'x' } }) },
    { weight: 1, arbitrary: fc.constantFrom({ sessionPerTick: true, input: { content: 'x' } }, { input: { content: 'x' } }, { sessionId: 'fz', sessionPerTick: true, input: { content: 'x' } }, { sessionId: '{x}', input: { content: '' } }, null) },
  ),
}, { requiredKeys: ['cron', 'run'] });

describe('generated schedule bodies from an admin key', () => {
  it('make a schedule with five fire times, or are refused 400 VALIDATION_FAILED naming a body field, and a refusal writes nothing', async () => {
    let baseline = await snapshot();
    let accepted = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(scheduleBody, async (body) => {
        const text = JSON.stringify(body);
        const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) };
        const res = await send('POST', '/v1/scopes/acme/schedules', headers, text);
        const what = `${text} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status === 201) {
          accepted++;
          const made = JSON.parse(res.text) as { id: string; nextFireTimes: string[] };
          expect(made.nextFireTimes, what).toHaveLength(5);
          // Deleted again, so the scope never reaches its cap.
          expect((await send('DELETE', `/v1/scopes/acme/schedules/${made.id}`, { authorization: `Bearer ${key}` }, undefined)).status, what).toBe(204);
          baseline = await snapshot();
          return;
        }
        refused++;
        expectBodyRefusal(res.text, what);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: Math.min(RUNS, 200), endOnFailure: true },
    );
    console.log(`generated schedule bodies: ${accepted} made, ${refused} refused`);
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });
});

/** Pause bodies: until a time, for a while, both, or neither; values mostly in range, some past them or of the wrong type. */
const pauseBody = fc.record({
  untilMs: fc.oneof(
    { weight: 4, arbitrary: fc.integer({ min: 1_000, max: 365 * 86_400_000 }).map((ms) => Date.now() + 60_000 + ms) },
    { weight: 1, arbitrary: fc.constantFrom(0, -1, 1, 1.5, Date.now() - 1_000, Date.now() + 400 * 86_400_000, '1', null, Number.MAX_SAFE_INTEGER + 2) },
  ),
  forMs: limitValue(1_000, 366 * 86_400_000),
  extra: fc.constant(1),
}, { requiredKeys: [] });

describe('generated pause bodies from an operator key', () => {
  it('pause the bucket as asked, or are refused 400 VALIDATION_FAILED naming a body field, and a refusal writes nothing', async () => {
    let baseline = await snapshot();
    let accepted = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(pauseBody, async (body) => {
        const text = JSON.stringify(body);
        const res = await send('POST', '/v1/rate-limits/fuzz%3Abucket/pause', {
          authorization: `Bearer ${operator}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)),
        }, text);
        const what = `${text} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status === 200) {
          accepted++;
          const paused = JSON.parse(res.text).paused;
          // An operator's pause: nothing asked of a provider, nothing capped.
          const operatorPause = { by: 'operator', sinceMs: expect.any(Number), askedMs: null, capped: false };
          // forMs counts from the pause's own time (Redis's, stamped as sinceMs).
          const forMs = body.forMs === undefined ? undefined : paused.sinceMs + Number(body.forMs);
          if (body.untilMs !== undefined) expect(paused, what).toEqual({ ...operatorPause, untilMs: body.untilMs });
          else if (forMs !== undefined) expect(paused, what).toEqual({ ...operatorPause, untilMs: forMs });
          else expect(paused, what).toEqual({ ...operatorPause, untilMs: null });
          baseline = await snapshot();
          return;
        }
        refused++;
        expectBodyRefusal(res.text, what);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: Math.min(RUNS, 200), endOnFailure: true },
    );
    console.log(`generated pause bodies: ${accepted} paused, ${refused} refused`);
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    // A bucket RATE_LIMITS does not define: 404 for an operator, 403 for a scope's key, before anything is read.
    const nobody = await send('DELETE', '/v1/rate-limits/no-such-bucket/pause', { authorization: `Bearer ${operator}` }, undefined);
    expect([nobody.status, JSON.parse(nobody.text).error.code]).toEqual([404, 'NOT_FOUND']);
    expect((await send('DELETE', '/v1/rate-limits/fuzz%3Abucket/pause', { authorization: `Bearer ${key}` }, undefined)).status).toBe(403);
  });
});

describe('generated nesting in every JSON body', () => {
  it('past BODY_MAX_DEPTH is 400 VALIDATION_FAILED on every route that reads JSON, whatever the shape, and writes nothing', async () => {
    // The default body limit, so bodies nested tens of thousands deep arrive whole.
    const wide = await h.startApi({ BODY_LIMIT_BYTES: String(1024 * 1024) });
    const u = new URL(wide.url);
    const target = { host: u.hostname, port: Number(u.port) };
    const max = h.configWith().BODY_MAX_DEPTH;
    const jsonRoutes = routes.filter((r) => r.method === 'POST' && !r.path.endsWith('/artifacts'));
    // Ways to go one or two levels down, each with its closing text.
    const levels: [string, string, number][] = [['[', ']', 1], ['{"a":', '}', 1], ['{"":[', ']}', 2], ['[{"k":', '}]', 2], ['[1,"[{",', ']', 1]];
    let baseline = await snapshot();
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...jsonRoutes),
        fc.constantFrom('memory', 'metadata', 'outputSchema', 'value', 'input', 'sessionId'),
        fc.array(fc.constantFrom(...levels), { minLength: 1, maxLength: 3 }),
        fc.oneof(fc.integer({ min: max - 3, max: max + 1 }), fc.integer({ min: max + 2, max: 60_000 })),
        async (route, field, shape, wanted) => {
          let open = '';
          let close = '';
          let depth = 1; // the body object
          for (let i = 0; depth < wanted; i++) {
            const [o, c, n] = shape[i % shape.length];
            open += o;
            close = c + close;
            depth += n;
          }
          const body = `{"sessionId":"s1","input":{"content":"x"},"${field}":${open}0${close}}`;
          const path = route.path.replace(/\{(\w+)\}/g, (_, p: string) => VALID[p]);
          // An operator route takes an operator key (a scope's key is refused before the body is read).
          const res = await post(target, route.access === 'operator' ? operator : key, path, body, 'application/json');
          const what = `${route.path} ${field} ${depth} levels -> ${res.status} ${res.text.slice(0, 200)}`;
          expect(res.status, what).toBeLessThan(500);
          if (route.path === '/v1/waits/{token}') {
            // The token is opened before the body is read: a made-up one is 404 whatever the body
            // (test/waits-abuse.test.ts reads a real token's malformed body).
            expect([res.status, JSON.parse(res.text).error.code], what).toEqual([404, 'NOT_FOUND']);
          } else if (depth > max && isOpenAi(route.path)) {
            expect(res.status, what).toBe(400);
            expect(JSON.parse(res.text).error, what).toMatchObject({ code: 'validation_failed', type: 'invalid_request_error', param: null });
          } else if (depth > max) {
            expect(res.status, what).toBe(400);
            expect(JSON.parse(res.text).error, what).toMatchObject({ code: 'VALIDATION_FAILED', details: [{ path: 'body' }] });
          }
          if (res.status < 400) baseline = await snapshot();
          else await expectUnchangedSince(baseline, what);
        },
      ),
      { numRuns: NESTING_RUNS, endOnFailure: true },
    );
    await wide.close();
  });
});

describe('generated output schemas on submit', () => {
  it('never answer 5xx: a schema is accepted or refused with a registered code naming outputSchema, and a refusal writes nothing', async () => {
    // A scope of its own: the property above may have drained acme's runtime (a well-formed request).
    const schemasKey = await h.key('schemas', 'client');
    let baseline = await snapshot();
    const seen = new Map<string, number>();
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(outputSchemaArb, async (outputSchema) => {
        const body = JSON.stringify({ ...validSubmit, outputSchema });
        const headers = { authorization: `Bearer ${schemasKey}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) };
        const res = await send('POST', '/v1/scopes/schemas/runs', headers, body);
        const what = `outputSchema=${JSON.stringify(outputSchema).slice(0, 300)} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status < 400) {
          accepted++;
          baseline = await snapshot();
          return;
        }
        const error = (JSON.parse(res.text) as { error: { code: keyof typeof ERROR_CODES; details: { path: string }[] } }).error;
        expect(Object.keys(ERROR_CODES), what).toContain(error.code);
        expect(ERROR_CODES[error.code].status, what).toBe(res.status);
        if (error.code === 'OUTPUT_SCHEMA_INVALID') expect(error.details[0].path, what).toMatch(/^body\.outputSchema/);
        seen.set(error.code, (seen.get(error.code) ?? 0) + 1);
        await expectUnchangedSince(baseline, what);
      }),
      { numRuns: SCHEMA_RUNS, endOnFailure: true },
    );
    console.log(`${SCHEMA_RUNS} generated schemas: ${accepted} accepted; refusals by code:`, Object.fromEntries(seen));
    expect(accepted).toBeGreaterThan(0);
    expect(seen.get('OUTPUT_SCHEMA_INVALID')).toBeGreaterThan(0);
  });
});

describe('generated uploads, stream-token mints, scheduled submits and cron schedules against small quotas', () => {
  it('are accepted, or refused with their quota’s registered code and Retry-After where it gives one, and a refusal writes nothing', async () => {
    const small = await h.startApi({
      BODY_LIMIT_BYTES: '8192', ARTIFACT_MAX_BYTES: '64', ARTIFACT_SCOPE_MAX_BYTES: '128', ARTIFACT_UPLOAD_BYTES_PER_SEC: '64',
      ARTIFACT_UPLOAD_BURST_BYTES: '64', STREAM_TOKEN_MINT_PER_MIN: '5', SCHEDULED_MAX_PER_SCOPE: '3',
      SCHEDULE_TEMPLATE_MAX_BYTES: '1024', SCHEDULES_MAX_PER_SCOPE: '3',
    });
    const u = new URL(small.url);
    const target = { host: u.hostname, port: Number(u.port) };
    const quotaKey = await h.key('quotas', 'client');
    const quotaAdmin = await h.key('quotas', 'admin');
    // Buckets expire by themselves once full, which is no write of a request: left out of the comparison.
    const state = async () => [...(await snapshot()).entries()].filter(([k]) => !k.includes(':ratelimit:')).sort();
    const op = fc.oneof(
      fc.record({ kind: fc.constant('upload' as const), size: fc.integer({ min: 1, max: 64 }) }),
      fc.record({ kind: fc.constant('mint' as const), what: fc.constantFrom('/sessions/s1/stream-token', '/sessions/s2/stream-token', '/runs/rmissing0000000000/stream-token') }),
      fc.record({ kind: fc.constant('schedule' as const), delayMs: fc.integer({ min: 60_000, max: 86_400_000 }), at: fc.boolean() }),
      fc.record({ kind: fc.constant('cron' as const), size: fc.integer({ min: 1, max: 2048 }) }),
    );
    const allowed: Record<string, string[]> = {
      upload: ['ARTIFACT_QUOTA_EXCEEDED', 'ARTIFACT_RATE_LIMITED'],
      mint: ['STREAM_TOKEN_RATE_LIMITED', 'RUN_NOT_FOUND'],
      schedule: ['TOO_MANY_SCHEDULED_RUNS'],
      cron: ['SCHEDULE_TEMPLATE_TOO_LARGE', 'TOO_MANY_SCHEDULES'],
    };
    const upload = (body: Buffer) => post(target, quotaKey, '/v1/scopes/quotas/artifacts', body, 'application/pdf');
    // The upload rate, whatever order the generated operations come in: the burst (64 bytes)
    // spent at once, the next upload waits a second for its bytes.
    expect((await upload(Buffer.alloc(64, 1))).status).toBe(201);
    const before = await state();
    const limited = await upload(Buffer.alloc(64, 2));
    expect(limited.status, limited.text).toBe(429);
    expect(JSON.parse(limited.text).error.code).toBe('ARTIFACT_RATE_LIMITED');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(await state()).toEqual(before);
    let baseline = await state();
    const seen = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(op, async (o) => {
        const [path, body, type] = o.kind === 'upload' ? ['/v1/scopes/quotas/artifacts', Buffer.alloc(o.size, 7), 'application/pdf']
          : o.kind === 'mint' ? [`/v1/scopes/quotas${o.what}`, '{}', 'application/json']
            : o.kind === 'cron' ? ['/v1/scopes/quotas/schedules', JSON.stringify({
              cron: '0 0 1 1 *', run: { sessionId: 's1', input: { content: 'c'.repeat(o.size) }, runtime: h.runtime },
            }), 'application/json']
              : ['/v1/scopes/quotas/runs', JSON.stringify({
                sessionId: 's1', input: { content: 'later' }, runtime: h.runtime,
                ...(o.at ? { runAt: new Date(Date.now() + o.delayMs).toISOString() } : { delayMs: o.delayMs }),
              }), 'application/json'];
        const res = await post(target, o.kind === 'cron' ? quotaAdmin : quotaKey, path, body, type);
        const what = `${o.kind} ${JSON.stringify(o)} -> ${res.status} ${res.text.slice(0, 300)}`;
        if (res.status < 400) {
          baseline = await state();
          return;
        }
        const error = (JSON.parse(res.text) as { error: { code: keyof typeof ERROR_CODES } }).error;
        expect(allowed[o.kind], what).toContain(error.code);
        expect(ERROR_CODES[error.code].status, what).toBe(res.status);
        if (error.code.endsWith('RATE_LIMITED')) expect(Number(res.headers['retry-after']), what).toBeGreaterThanOrEqual(1);
        if (error.code === 'TOO_MANY_SCHEDULED_RUNS') expect(res.headers['retry-after'], what).toBeUndefined();
        if (error.code === 'SCHEDULE_TEMPLATE_TOO_LARGE') expect((JSON.parse(res.text) as { error: { details: { path: string }[] } }).error.details.map((d) => d.path), what).toEqual(['body.run']);
        seen.set(error.code, (seen.get(error.code) ?? 0) + 1);
        expect(await state(), what).toEqual(baseline);
      }),
      { numRuns: Math.min(RUNS, 150), endOnFailure: true },
    );
    console.log('quota refusals by code:', Object.fromEntries(seen));
    for (const code of ['ARTIFACT_QUOTA_EXCEEDED', 'STREAM_TOKEN_RATE_LIMITED', 'TOO_MANY_SCHEDULED_RUNS', 'SCHEDULE_TEMPLATE_TOO_LARGE']) {
      expect(seen.get(code), code).toBeGreaterThan(0);
    }
    await small.close();
  });
});

/** POST /v1/responses bodies: mostly well-formed (background, so nothing waits for a worker), now and then a bad or unsupported field. */
const responsesBodyArb = fc.tuple(fc.record({
  model: mostlyOf(['echo'], ['', 7, null, 'x'.repeat(200)]),
  input: mostlyOf(['hi', [{ role: 'user', content: 'hi' }], [{ role: 'system', content: 's' }, { role: 'user', content: [{ type: 'input_text', text: 'hi' }] }]],
    ['', [], [{ role: 'assistant', content: 'x' }], [{ role: 'system', content: 's' }], [{ type: 'function_call_output', call_id: 'c', output: 'x' }], 3]),
  instructions: mostlyOf(['Be brief.', null], [5, ['x']]),
  metadata: mostlyOf([{ a: 'b' }, null], [{ a: 1 }, { system: 'x' }, Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']))]),
  max_output_tokens: mostlyOf([16, 1000], [0, -1, 1.5, '16']),
  previous_response_id: mostlyOf([null], ['resp_rmissing0000000000', 'nope', 9]),
  store: mostlyOf([true, null], [false, 'yes']),
  background: mostlyOf([true], ['true']),
}, { requiredKeys: ['background'] }), fc.constantFrom(undefined, undefined, undefined, 'temperature', 'tools', 'reasoning', 'truncation'))
  .map(([body, extra]) => (extra ? { ...body, [extra]: extra === 'tools' ? [] : 0.5 } : body));

/**
 * Posts each generated body to an OpenAI-compatible route: no 5xx; an accepted one goes to
 * `accepted` (which takes a new baseline when it wrote), a refusal is in OpenAI's shape, names
 * its field and writes nothing. Answers the refusals by code and how many were accepted.
 */
async function openAiBodies<T>(path: string, bodies: fc.Arbitrary<T>, accepted: (res: RawResponse, what: string) => Promise<void>) {
  let baseline = await snapshot();
  let count = 0;
  const seen = new Map<string, number>();
  await fc.assert(
    fc.asyncProperty(bodies, async (body) => {
      const text = JSON.stringify(body);
      const res = await send('POST', path, {
        authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)),
      }, text);
      const what = `${text} -> ${res.status} ${res.text.slice(0, 300)}`;
      expect(res.status, what).toBeLessThan(500);
      if (res.status === 200) {
        count++;
        await accepted(res, what);
        baseline = await snapshot();
        return;
      }
      const code = expectOpenAiError(res.status, res.text, what);
      seen.set(code, (seen.get(code) ?? 0) + 1);
      // A body's refusal names its field (a missing previous response names previous_response_id too).
      expect(JSON.parse(res.text).error.param, what).toMatch(/^[a-z_]+(\[\d+\])?(\.|$)/);
      await expectUnchangedSince(baseline, what);
    }),
    { numRuns: Math.min(RUNS, 200), endOnFailure: true },
  );
  return { accepted: count, seen };
}

describe('generated OpenAI response bodies', () => {
  it('are queued (background) or refused in OpenAI\'s shape naming the field, and a refusal writes nothing', async () => {
    const { accepted, seen } = await openAiBodies('/v1/responses', responsesBodyArb, async (res, what) => {
      const made = JSON.parse(res.text) as { id: string };
      expect(made, what).toMatchObject({ object: 'response', status: 'queued', background: true });
      const baseline = await snapshot();
      // Queued (no worker here), it has not ended: its delete is refused and takes nothing.
      // Its record is compared by its fields: the delete's read of it may move the hash's
      // rehashing on, which reorders its DUMP and changes nothing else.
      const record = h.keys.scope('acme').run(made.id.slice('resp_'.length));
      const fields = await h.redis.hgetall(record);
      const del = await send('DELETE', `/v1/responses/${made.id}`, { authorization: `Bearer ${key}` }, undefined);
      expect(del.status, `${what}; DELETE -> ${del.text}`).toBe(409);
      expect(expectOpenAiError(del.status, del.text, what)).toBe('openai:run_not_finished');
      const after = await snapshot();
      expect(after.has(record), what).toBe(true);
      expect(await h.redis.hgetall(record), what).toEqual(fields);
      after.delete(record);
      expectUnchanged(after, new Map([...baseline].filter(([k]) => k !== record)), `${what}; DELETE`);
    });
    console.log(`generated response bodies: ${accepted} queued; refusals by code:`, Object.fromEntries(seen));
    expect(accepted).toBeGreaterThan(0);
    expect(seen.get('openai:unsupported_parameter')).toBeGreaterThan(0);
  });
});

/** A chat message: well-formed mostly (tool calls and the tool messages answering them among them), now and then not. */
const fnCall = (id: string) => ({ id, type: 'function', function: { name: 'get_weather', arguments: '{}' } });
const chatCompletionMessage = mostlyOf([
  { role: 'user', content: 'hi' }, { role: 'system', content: 's' }, { role: 'assistant', content: 'a' },
  { role: 'assistant', content: null, tool_calls: [fnCall('a')] }, { role: 'assistant', content: 'b', tool_calls: [fnCall('a'), fnCall('b')] },
  { role: 'tool', tool_call_id: 'a', content: 'r' }, { role: 'tool', tool_call_id: 'b', content: [{ type: 'text', text: 'r' }] },
], [
  { role: 'tool', content: 'r' }, { role: 'function', name: 'f', content: 'r' }, { role: 'assistant' }, { role: 'assistant', content: null, tool_calls: [] },
  { role: 'assistant', content: null, tool_calls: [{ ...fnCall('c'), type: 'custom' }] }, { role: 'user', content: null }, 'hi',
]);

/** POST /v1/chat/completions bodies, streamed (nothing waits for a worker): tool turns that pair up or not, tools and tool_choice. */
const chatCompletionBodyArb = fc.record({
  model: mostlyOf(['echo'], ['', 7]),
  messages: mostly(fc.oneof(fc.constantFrom(
    [{ role: 'user', content: 'hi' }],
    [{ role: 'user', content: 'hi' }, { role: 'assistant', content: null, tool_calls: [fnCall('a')] }, { role: 'tool', tool_call_id: 'a', content: 'r' }],
  ), fc.array(chatCompletionMessage, { minLength: 1, maxLength: 5 })), fc.constantFrom([], 'hi', null), 8),
  tools: mostlyOf([[{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }], null],
    [[{ type: 'custom', custom: { name: 'g' } }], [{ type: 'function', function: { name: 'a b' } }], [{ type: 'function', name: 'flat' }]]),
  tool_choice: mostlyOf(['auto', 'none', null], ['required', { type: 'function', function: { name: 'get_weather' } }, 7]),
  parallel_tool_calls: mostlyOf([true, null], [false, 'yes']),
  stream: fc.constant(true),
}, { requiredKeys: ['model', 'messages', 'stream'] });

describe('generated OpenAI chat completion bodies', () => {
  it('stream or are refused in OpenAI\'s shape naming the field, and a refusal writes nothing', async () => {
    const { accepted, seen } = await openAiBodies('/v1/chat/completions', chatCompletionBodyArb, async (res, what) => {
      expect(String(res.headers['content-type']), what).toMatch(/^text\/event-stream/);
    });
    console.log(`generated chat completion bodies: ${accepted} streamed; refusals by code:`, Object.fromEntries(seen));
    expect(accepted).toBeGreaterThan(0);
    expect(seen.get('openai:validation_failed')).toBeGreaterThan(0);
    expect(seen.get('openai:unsupported_parameter')).toBeGreaterThan(0);
  });
});

/**
 * JSON-RPC messages to /mcp: MCP's methods with params mostly of the right shape, now and then
 * not. A `tools/call` asked as a task makes a run (no worker serves it here: it stays queued);
 * one answered when its run ends always carries a field no tool takes, so none waits here.
 */
const mcpMessageArb = fc.record({
  method: fc.constantFrom('tools/list', 'tools/call', 'tasks/get', 'tasks/result', 'tasks/cancel', 'tasks/list', 'resources/list', 'ping', ''),
  name: mostlyOf(['echo', 'chat'], ['', 'no such agent', 7, null, 'x'.repeat(100), '{scope}']),
  arguments: mostlyOf([{ message: 'hi' }, { message: 'hi', sessionId: 'mcp-fuzz' }],
    [{}, { message: '' }, { message: 7 }, { message: 'hi', sessionId: 'bad id' }, [], 'hi', null]),
  task: fc.option(mostlyOf([{ ttl: 60_000 }, {}], [{ ttl: 'long' }, 'now', null]), { nil: undefined }),
  taskId: mostlyOf(['rdoesnotexist000000'], ['', 'x'.repeat(300), 5, null, '../r', '{acme}']),
  cursor: fc.option(mostlyOf(['1_x'], ['', 9, 'nope']), { nil: undefined }),
  id: mostlyOf([1, 'req-1'], [null, 1.5, {}]),
});

type McpMessage = typeof mcpMessageArb extends fc.Arbitrary<infer T> ? T : never;

/** The params a method takes, from the generated fields (a field of the wrong shape stays wrong). */
function mcpParams(m: McpMessage): Record<string, unknown> {
  if (m.method === 'tools/call') {
    const args = m.task === undefined && typeof m.arguments === 'object' && m.arguments !== null && !Array.isArray(m.arguments)
      ? { ...m.arguments, 'not-an-argument': true } : m.arguments;
    return { name: m.name, arguments: args, ...(m.task === undefined ? {} : { task: m.task }) };
  }
  if (m.method.startsWith('tasks/') && m.method !== 'tasks/list') return { taskId: m.taskId };
  return m.cursor === undefined ? {} : { cursor: m.cursor };
}

describe('generated MCP messages', () => {
  it('are answered with a JSON-RPC result or error (an error writes nothing), or refused with a registered code (writing nothing)', async () => {
    let baseline = await snapshot();
    let created = 0;
    const seen = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(mcpMessageArb, async (m) => {
        const text = JSON.stringify({ jsonrpc: '2.0', id: m.id, method: m.method, params: mcpParams(m) });
        const res = await fetch(`http://${host}:${port}/mcp`, {
          method: 'POST', body: text,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        });
        const answer = await res.text();
        const what = `${text} -> ${res.status} ${answer.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status >= 400) {
          const error = (JSON.parse(answer) as { error: { code: keyof typeof ERROR_CODES } }).error;
          expect(ERROR_CODES[error.code]?.status, what).toBe(res.status);
          seen.set(error.code, (seen.get(error.code) ?? 0) + 1);
          await expectUnchangedSince(baseline, what);
          return;
        }
        const reply = answer.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6))).at(-1);
        expect(reply, what).toMatchObject({ jsonrpc: '2.0', id: m.id });
        if (reply.error) {
          // The SDK answers params of the wrong type (a taskId of 5) with -32603, its parse failure: an answer all the same.
          expect(Number.isInteger(reply.error.code), what).toBe(true);
          seen.set(`jsonrpc:${reply.error.code}`, (seen.get(`jsonrpc:${reply.error.code}`) ?? 0) + 1);
          await expectUnchangedSince(baseline, what);
          return;
        }
        if (reply.result.task) {
          created++;
          expect(reply.result.task, what).toMatchObject({ status: 'working', statusMessage: 'run queued' });
          baseline = await snapshot();
          return;
        }
        // Answered (a read: tools/list, tasks/list, ping): not a rejection. A read may step Redis's
        // incremental rehash of a large run record, which reorders its DUMP, not its fields.
        seen.set(`ok:${m.method}`, (seen.get(`ok:${m.method}`) ?? 0) + 1);
        baseline = await snapshot();
      }),
      { numRuns: Math.min(RUNS, 200), endOnFailure: true },
    );
    console.log(`generated MCP messages: ${created} tasks made; other answers:`, Object.fromEntries(seen));
    expect(created).toBeGreaterThan(0);
    expect(seen.get('jsonrpc:-32602')).toBeGreaterThan(0);
  });
});
