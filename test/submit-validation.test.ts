import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

let h: Harness;
let url: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness({ BODY_LIMIT_BYTES: '4096' });
  url = (await h.startApi()).url;
  acme = await h.client(url, 'acme');
});

const valid = { sessionId: 's1', input: { content: 'hi' } };

/** Sends a bad request and checks the 4xx shape, and that Redis holds exactly what it held before. */
async function rejects(
  send: () => Promise<{ status: number; body: any }>, status: number, code: string, path?: string,
): Promise<void> {
  const before = (await h.allKeys()).sort();
  const res = await send();
  expect(res.status).toBe(status);
  expect(res.body.error.code).toBe(code);
  expect(res.body.error.message).toBeTypeOf('string');
  expect(Array.isArray(res.body.error.details)).toBe(true);
  if (path) expect(res.body.error.details.map((d: any) => d.path)).toContain(path);
  expect((await h.allKeys()).sort()).toEqual(before);
}

describe('submit rejects bad input with a clear 4xx and writes nothing', () => {
  const cases: [string, unknown, string][] = [
    ['missing sessionId', { input: { content: 'x' } }, 'body.sessionId'],
    ['missing input', { sessionId: 's1' }, 'body.input'],
    ['empty content', { sessionId: 's1', input: { content: '' } }, 'body.input.content'],
    ['content of the wrong type', { sessionId: 's1', input: { content: 42 } }, 'body.input.content'],
    ['sessionId with braces', { ...valid, sessionId: 'a{b}' }, 'body.sessionId'],
    ['sessionId with a colon', { ...valid, sessionId: 'a:b' }, 'body.sessionId'],
    ['sessionId too long', { ...valid, sessionId: 'x'.repeat(65) }, 'body.sessionId'],
    ['runtime with a colon', { ...valid, runtime: 'rt:1' }, 'body.runtime'],
    ['unknown field', { ...valid, extra: true }, 'body'],
    ['unknown field inside input', { ...valid, input: { content: 'x', role: 'system' } }, 'body.input'],
    ['metadata not an object', { ...valid, metadata: [1, 2] }, 'body.metadata'],
    ['maxAttempts zero', { ...valid, maxAttempts: 0 }, 'body.maxAttempts'],
    ['multitask unknown', { ...valid, multitask: 'later' }, 'body.multitask'],
    ['priority above 9', { ...valid, priority: 10 }, 'body.priority'],
    ['priority not an integer', { ...valid, priority: 4.5 }, 'body.priority'],
    ['concurrencyKey with a brace', { ...valid, concurrencyKey: 'org{1}' }, 'body.concurrencyKey'],
    ['concurrencyKey too long', { ...valid, concurrencyKey: 'k'.repeat(129) }, 'body.concurrencyKey'],
    ['body is an array', [valid], 'body'],
  ];
  for (const [name, body, path] of cases) {
    it(name, () => rejects(() => acme.post('/runs', body), 400, 'VALIDATION_FAILED', path));
  }

  it('caller memory null', () =>
    rejects(() => acme.post('/runs', { ...valid, memory: null }), 400, 'CALLER_MEMORY_INVALID', 'body.memory'));

  it('scope with braces, colons or too long in the path', async () => {
    for (const scope of ['a%7Bb%7D', 'a:b', 'x'.repeat(65)]) {
      const key = await h.key('acme');
      // A key of another scope never learns more than 404, whatever the path holds.
      await rejects(
        () => call(url, 'POST', `/v1/scopes/${scope}/runs`, valid, { authorization: `Bearer ${key}` }), 404, 'NOT_FOUND',
      );
    }
  });

  it('non-JSON body', () =>
    rejects(() => acme.post('/runs', '{"sessionId": "s1", ', { 'content-type': 'application/json' }), 400, 'INVALID_JSON'));

  it('a body that is not declared JSON', () =>
    rejects(() => acme.post('/runs', 'sessionId=s1', { 'content-type': 'application/x-www-form-urlencoded' }), 415, 'UNSUPPORTED_MEDIA_TYPE'));

  it('body too large', () =>
    rejects(() => acme.post('/runs', { ...valid, input: { content: 'x'.repeat(5000) } }), 413, 'PAYLOAD_TOO_LARGE'));

  it('no key, or an unknown key', async () => {
    await rejects(() => call(url, 'POST', '/v1/scopes/acme/runs', valid), 401, 'UNAUTHENTICATED');
    await rejects(
      () => call(url, 'POST', '/v1/scopes/acme/runs', valid, { authorization: 'Bearer bk_not-a-real-key-at-all' }), 401, 'UNAUTHENTICATED',
    );
  });

  it('a valid submit still works after all of that', async () => {
    const res = await acme.submit('s1', 'fine');
    expect(res.status).toBe(202);
  });
});
