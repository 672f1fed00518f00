import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Invariant 10 and 12 for what a body can do before it is even read as a request: nesting,
 * bytes that are not UTF-8, repeated headers, a reused idempotency key. Each refusal comes
 * before the rate limiter and before any Redis write: Redis stays byte for byte the same.
 * The rate limit is on (its defaults): a refused request must not spend a token either.
 */
let h: Harness;
let api: { url: string; port: number };
let acme: ScopeClient;
let depth: number;

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0' });
  const started = await h.startApi();
  api = { url: started.url, port: started.port };
  acme = await h.client(api.url, 'acme', 'client');
  depth = h.config.BODY_MAX_DEPTH;
});

/** Every key of this file's prefix with a digest of its DUMP. */
async function snapshot(): Promise<[string, string][]> {
  const keys = (await h.allKeys()).sort();
  const pipe = h.redis.pipeline();
  for (const k of keys) pipe.dumpBuffer(k);
  const dumps = (await pipe.exec()) ?? [];
  return keys.map((k, i) => [k, createHash('sha1').update((dumps[i][1] as Buffer | null) ?? 'gone').digest('hex')]);
}

/** Arrays nested `n` deep around 1, as text (JSON.stringify itself cannot make 5,000 levels on a test's stack). */
const nested = (n: number) => `${'['.repeat(n)}1${']'.repeat(n)}`;

const post = (body: string | Buffer, headers: Record<string, string> = {}) =>
  fetch(`${api.url}/v1/scopes/acme/runs`, {
    method: 'POST', body: typeof body === 'string' ? body : new Uint8Array(body),
    headers: { ...acme.headers, 'content-type': 'application/json', ...headers },
  }).then(async (res) => ({ status: res.status, body: await res.json() as any }));

const submitText = (sessionId: string, extra: string) =>
  `{"sessionId":"${sessionId}","input":{"content":"hello"},"runtime":"${h.runtime}"${extra}}`;

describe('nesting, checked on the bytes before they are parsed', () => {
  it('memory or metadata 5,000 deep is 400 VALIDATION_FAILED, and Redis is byte-identical (no token spent, no scope added)', async () => {
    const admin = await h.client(api.url, 'acme', 'admin');
    const before = await snapshot();
    for (const extra of [`,"memory":${nested(5_000)}`, `,"metadata":{"a":${nested(5_000)}}`, `,"outputSchema":{"a":${nested(5_000)}}`]) {
      const res = await post(submitText('deep', extra));
      expect(res.status, extra.slice(0, 20)).toBe(400);
      expect(res.body.error).toEqual({
        code: 'VALIDATION_FAILED', message: 'The request is invalid.',
        details: [{ path: 'body', message: `nested deeper than ${depth} levels of arrays and objects` }],
      });
    }
    // Every route that reads a JSON body: resolve's value is any JSON too.
    const resolve = await fetch(`${api.url}/v1/scopes/acme/runs/rnone/steps/step:x:1/resolve`, {
      method: 'POST', headers: { ...admin.headers, 'content-type': 'application/json' }, body: `{"value":${nested(5_000)}}`,
    });
    expect(resolve.status).toBe(400);
    expect(await snapshot()).toEqual(before);
  });

  it('the limit is exact: BODY_MAX_DEPTH levels are accepted, one more is not', async () => {
    // The body object is the first level.
    const ok = await post(submitText('edge', `,"memory":${nested(depth - 1)}`));
    expect(ok.status).toBe(202);
    const over = await post(submitText('edge', `,"memory":${nested(depth)}`));
    expect(over.status).toBe(400);
    // Brackets inside strings are text, not nesting.
    const text = await post(submitText('edge', `,"memory":${JSON.stringify('['.repeat(10_000) + '\\"{')}`));
    expect(text.status).toBe(202);
  });
});

describe('bytes that are not UTF-8', () => {
  it('are 400 INVALID_JSON (never silently turned into U+FFFD), and a charset other than UTF-8 is 415', async () => {
    const before = await snapshot();
    // "café" in Latin-1: a lone 0xE9 byte inside the content, where UTF-8 needs two.
    const body = Buffer.from(submitText('utf', '').replace('hello', 'caf\u0000'));
    body[body.indexOf(0)] = 0xe9;
    const res = await post(body);
    expect([res.status, res.body.error.code, res.body.error.details]).toEqual([400, 'INVALID_JSON', [{ path: 'body', message: 'not valid UTF-8' }]]);
    const utf16 = await post(Buffer.from(submitText('utf', ''), 'utf16le'), { 'content-type': 'application/json; charset=utf-16' });
    expect([utf16.status, utf16.body.error.code]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    expect(await snapshot()).toEqual(before);
    const fine = await post(Buffer.from(submitText('utf', '').replace('hello', 'café ✓ 😀')), { 'content-type': 'application/json; charset=UTF-8' });
    expect(fine.status).toBe(202);
  });
});

/** A raw HTTP/1.1 exchange, so a header can be sent twice exactly as written. */
function rawRequest(lines: string[], body = ''): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(api.port, '127.0.0.1');
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (c) => { text += c; });
    socket.on('end', () => resolve({ status: Number(text.split(' ')[1]), text }));
    socket.on('error', reject);
    socket.write(`${[...lines, 'connection: close', `content-length: ${Buffer.byteLength(body)}`].join('\r\n')}\r\n\r\n${body}`);
  });
}

describe('repeated headers', () => {
  it('two Authorization headers are 400, whichever of them is valid', async () => {
    const other = await h.key('acme', 'admin');
    const before = await snapshot();
    for (const [first, second] of [[acme.key, other], [acme.key, 'not-a-key-at-all-xxxx'], ['not-a-key-at-all-xxxx', acme.key]]) {
      const res = await rawRequest([
        'POST /v1/scopes/acme/runs HTTP/1.1', 'host: x', 'content-type: application/json',
        `authorization: Bearer ${first}`, `Authorization: Bearer ${second}`,
      ], submitText('twice', ''));
      expect(res.status).toBe(400);
      expect(res.text).toContain('"path":"headers.authorization","message":"sent more than once"');
    }
    expect(await snapshot()).toEqual(before);
    const once = await rawRequest(['GET /v1/whoami HTTP/1.1', 'host: x', `authorization: Bearer ${acme.key}`]);
    expect(once.status).toBe(200);
  });
});

describe('a reused idempotency key', () => {
  it('returns the first run for the same request, and is 409 IDEMPOTENCY_MISMATCH for another', async () => {
    const request = { sessionId: 'idem', input: { content: 'charge it once' }, runtime: h.runtime, metadata: { a: 1, b: 2 }, idempotencyKey: 'order-42' };
    const first = await acme.post('/runs', request);
    expect(first.status).toBe(202);
    // The same request: key order and defaults written out make no difference.
    const again = await acme.post('/runs', { idempotencyKey: 'order-42', metadata: { b: 2, a: 1 }, agent: 'echo', multitask: 'enqueue', runtime: h.runtime, input: { content: 'charge it once' }, sessionId: 'idem' });
    expect([again.status, again.body.id]).toEqual([200, first.body.id]);
    const before = await snapshot();
    for (const changed of [{ input: { content: 'charge it twice' } }, { metadata: { a: 1, b: 3 } }, { sessionId: 'other' }, { maxAttempts: 1 }]) {
      const res = await acme.post('/runs', { ...request, ...changed });
      expect([res.status, res.body.error?.code], JSON.stringify(changed)).toEqual([409, 'IDEMPOTENCY_MISMATCH']);
    }
    expect((await snapshot()).filter(([k]) => !k.endsWith(':ratelimit:submit'))).toEqual(before.filter(([k]) => !k.endsWith(':ratelimit:submit')));
    // Another key for the changed request makes a new run.
    const other = await acme.post('/runs', { ...request, input: { content: 'charge it twice' }, idempotencyKey: 'order-43' });
    expect(other.status).toBe(202);
    expect(other.body.id).not.toBe(first.body.id);
  });
});
