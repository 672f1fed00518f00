import { createHash } from 'node:crypto';
import { request } from 'node:http';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/lib/contract/errors.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/**
 * Invariant 10 under generated input: for every route of /openapi.json, malformed params,
 * queries, headers and bodies never get a 5xx, always get a registered error code with its
 * registered status, and a rejected request leaves Redis byte for byte as it was.
 *
 * No worker runs and the API's sweeper is off, so nothing but the requests writes to Redis.
 * The submit rate limit is off here (its bucket is written by well-formed submits that end
 * in a 409, which is not bad input); test/tenancy-rate-limit.test.ts covers it.
 */
let h: Harness;
let host: string;
let port: number;
let key: string;
let routes: { method: string; path: string; params: string[] }[];

const RUNS = Number(process.env.FUZZ_RUNS ?? 300);

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0', BODY_LIMIT_BYTES: '8192' });
  const api = await h.startApi();
  const u = new URL(api.url);
  host = u.hostname;
  port = Number(u.port);
  key = await h.key('acme', 'admin');
  const doc = (await call(api.url, 'GET', '/openapi.json')).body;
  routes = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
    Object.keys(ops).map((method) => ({
      method: method.toUpperCase(),
      path,
      params: [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]),
    })),
  );
  expect(routes.length).toBeGreaterThan(10);
});

/** Everything in this file's key space, each key with a digest of its DUMP. */
async function snapshot(): Promise<Map<string, string>> {
  const keys = await h.allKeys();
  const pipe = h.redis.pipeline();
  for (const k of keys) pipe.dumpBuffer(k);
  const dumps = (await pipe.exec()) ?? [];
  const out = new Map<string, string>();
  keys.forEach((k, i) => {
    const dump = dumps[i][1] as Buffer | null;
    out.set(k, dump ? createHash('sha1').update(dump).digest('hex') : 'gone');
  });
  return out;
}

interface RawResponse { status: number; text: string; headers: Record<string, string | string[] | undefined> }

/** A raw HTTP request: no client-side normalisation of the path, headers or body. */
function send(method: string, path: string, headers: Record<string, string>, body: string | undefined): Promise<RawResponse> {
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

// ---- generators ---------------------------------------------------------------------

const VALID: Record<string, string> = {
  scope: 'acme', runId: 'rmissing0000000000', sessionId: 's1', runtimeId: 'default', stepKey: 'step:charge:1',
};

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
    'sessionId=a:b', 'limit=5&limit=6', 'unknown=1', 'cursor=' + '9'.repeat(40), 'status=',
  ),
);

const validSubmit = { sessionId: 's1', input: { content: 'hello' } };

/** Bodies: JSON of any shape, valid bodies with one field broken, and text that is not JSON. */
const jsonBody = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.record({
    field: fc.constantFrom('sessionId', 'input', 'runtime', 'agent', 'metadata', 'memory', 'maxAttempts', 'idempotencyKey',
      'multitask', 'outputSchema', 'cancelQueued', 'value', 'rerun', 'extra'),
    value: fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constant(null), fc.string({ minLength: 300_000, maxLength: 300_001 })),
  }).map(({ field, value }) => JSON.stringify({ ...validSubmit, [field]: value })),
  fc.constantFrom(
    '{', '{"a":', 'nul', '[1,2', '"\\uZZZZ"', '{"sessionId":"s1","input":{"content":""}}', '{"memory":null}',
    JSON.stringify({ ...validSubmit, memory: null }), JSON.stringify({ ...validSubmit, input: { content: 'x', role: 'system' } }),
    JSON.stringify({ ...validSubmit, metadata: Object.fromEntries(Array.from({ length: 70 }, (_, i) => [`k${i}`, i])) }),
    JSON.stringify({ ...validSubmit, outputSchema: { type: 12 } }), JSON.stringify({ cancelQueued: 'yes' }),
    JSON.stringify({ value: 1, rerun: true }), 'x'.repeat(9000),
  ),
);

const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8') },
  { weight: 1, arbitrary: fc.constantFrom('application/json; charset=latin1', 'text/plain', 'application/x-www-form-urlencoded',
    'application/json; charset=utf-16', undefined) },
);

const auth = fc.oneof(
  { weight: 6, arbitrary: fc.constant('valid') },
  { weight: 1, arbitrary: fc.constantFrom('', 'Bearer', 'Bearer short', 'Basic abc', 'Bearer ' + 'k'.repeat(300), 'bearer x') },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }).map((s) => `Bearer ${s.replace(/[^\x21-\x7e]/g, 'z')}`) },
);

const extraHeaders = fc.record({
  'last-event-id': fc.option(fc.constantFrom('0', 'abc', '1-2-3', '-1', '9'.repeat(30), '1-'), { nil: undefined }),
  'content-encoding': fc.oneof(
    { weight: 8, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.constantFrom('gzip', 'br', 'identity', 'zip') },
  ),
});

const malformedRequest = () =>
  fc.record({
    route: fc.constantFrom(...routes),
    params: fc.dictionary(fc.constantFrom('scope', 'runId', 'sessionId', 'runtimeId', 'stepKey'), fc.constant(true)).chain((broken) =>
      fc.record(Object.fromEntries(
        ['scope', 'runId', 'sessionId', 'runtimeId', 'stepKey'].map((p) => [p, broken[p] ? segment(p) : fc.constant(VALID[p])]),
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
        if (r.auth === 'valid') headers.authorization = `Bearer ${key}`;
        else if (r.auth) headers.authorization = r.auth;
        if (r.headers['last-event-id'] !== undefined) headers['last-event-id'] = r.headers['last-event-id'];
        if (r.body !== undefined) {
          if (r.contentType) headers['content-type'] = r.contentType;
          if (r.headers['content-encoding']) headers['content-encoding'] = r.headers['content-encoding'];
          headers['content-length'] = String(Buffer.byteLength(r.body));
        }
        const res = await send(r.route.method, path, headers, r.body);
        const what = `${r.route.method} ${path} ${JSON.stringify(headers)} body=${r.body?.slice(0, 200)} -> ${res.status} ${res.text.slice(0, 300)}`;
        expect(res.status, what).toBeLessThan(500);
        if (res.status < 400) {
          // Well-formed after all (e.g. a valid list query): not a rejection, so it may write.
          accepted++;
          baseline = await snapshot();
          return;
        }
        const body = JSON.parse(res.text) as { error: { code: keyof typeof ERROR_CODES; message: string; details: unknown[] } };
        expect(Object.keys(ERROR_CODES), what).toContain(body.error.code);
        expect(ERROR_CODES[body.error.code].status, what).toBe(res.status);
        expect(body.error.message, what).toBeTypeOf('string');
        expect(Array.isArray(body.error.details), what).toBe(true);
        seen.set(body.error.code, (seen.get(body.error.code) ?? 0) + 1);
        const after = await snapshot();
        expect([...after.entries()].sort(), what).toEqual([...baseline.entries()].sort());
      }),
      { numRuns: RUNS },
    );
    console.log(`${RUNS} generated requests: ${accepted} well-formed after all; rejections by code:`, Object.fromEntries(seen));
    expect(seen.get('VALIDATION_FAILED')).toBeGreaterThan(0);
  });
});
