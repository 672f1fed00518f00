import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import { redisNowMs } from '../src/lib/redis/redis.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call, readSse } from './helpers/http.ts';
import { expectExactly, fullLog, seen, words } from './helpers/stream-check.ts';

/**
 * Stream tokens over HTTP (invariant 14): minted by a key of the scope, they open the events
 * of one run or of one session's runs, resumable by Last-Event-ID, and nothing else; every
 * token that does not open a run is refused with the answer a request without credentials
 * gets. CORS answers the listed origins only. The browser side is in
 * stream-tokens-browser.test.ts.
 */
const PAGE = 'http://page.example:8080';

let h: Harness;
let api: ApiHandle;
let acme: ScopeClient;
let acmeClient: ScopeClient;
let globex: ScopeClient;

beforeAll(async () => {
  h = await useHarness({ CORS_ORIGINS: `${PAGE}, http://other-page.example` });
  api = await h.startApi();
  await h.startWorker();
  acme = await h.client(api.url, 'acme', 'admin');
  acmeClient = await h.client(api.url, 'acme', 'client');
  globex = await h.client(api.url, 'globex', 'client');
});

const events = (scope: string, runId: string, token?: string) =>
  `/v1/scopes/${scope}/runs/${runId}/events${token === undefined ? '' : `?access_token=${encodeURIComponent(token)}`}`;

/** A run of `who` that has finished, with its whole event log. */
async function finishedRun(who: ScopeClient, sessionId: string, content = words(12, sessionId)): Promise<string> {
  const sub = await who.submit(sessionId, content);
  expect(sub.status).toBe(202);
  await who.waitStatus(sub.body.id, ['succeeded']);
  return sub.body.id as string;
}

async function mint(who: ScopeClient, what: { runId: string } | { sessionId: string }): Promise<{ token: string; expiresAt: string }> {
  const path = 'runId' in what ? `/runs/${what.runId}/stream-token` : `/sessions/${what.sessionId}/stream-token`;
  const res = await who.post(path, {});
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  expect(res.headers.get('cache-control')).toBe('no-store');
  return res.body;
}

/** What a refused request is answered, headers a page could tell apart included. */
async function answer(path: string, init: { method?: string; headers?: Record<string, string>; body?: unknown } = {}) {
  const res = await call(api.url, init.method ?? 'GET', path, init.body, init.headers);
  return { status: res.status, body: res.body, wwwAuthenticate: res.headers.get('www-authenticate') };
}

describe('a stream token', () => {
  it('opens its run’s events without a key, resumes after Last-Event-ID, and works for a client key’s token too', async () => {
    const runId = await finishedRun(acme, 'tok-1');
    const log = await fullLog(h, 'acme', runId);
    const { token, expiresAt } = await mint(acmeClient, { runId });
    expect(token).toMatch(/^bst_[A-Za-z0-9_-]{43}$/);
    // A time (ISO) after the run it opens had finished, as the server stamps both.
    expect(new Date(expiresAt).toISOString()).toBe(expiresAt);
    expect(Date.parse(expiresAt)).toBeGreaterThan(Date.parse((await acme.get(`/runs/${runId}`)).body.finishedAt));

    const all = await readSse(api.url + events('acme', runId, token));
    expect(all.status).toBe(200);
    expect(all.ended).toBe(true);
    expectExactly(seen(all.events), log);

    // What a reconnecting EventSource sends: the same URL, and the id it last saw as a header.
    const from = log[3].id;
    const resumed = await readSse(api.url + events('acme', runId, token), { lastEventId: from });
    expectExactly(seen(resumed.events), log, from);
    const byQuery = await readSse(`${api.url}${events('acme', runId, token)}&after=${from}`);
    expectExactly(seen(byQuery.events), log, from);
    // A reader that already has `end` gets 204, as with a key: EventSource stops there.
    expect((await readSse(api.url + events('acme', runId, token), { lastEventId: log.at(-1)!.id })).status).toBe(204);
  });

  it('comes with a submit that asks for it, and streams the run live', async () => {
    const content = words(30, 'sub');
    const sub = await acmeClient.submit('tok-2', content, { streamToken: true, metadata: { delayMs: 5 } });
    expect(sub.status).toBe(202);
    expect(sub.body.streamToken).toMatchObject({ runId: sub.body.id, token: expect.stringMatching(/^bst_/) });
    expect(sub.body.streamToken.sessionId).toBeUndefined();
    const got = await readSse(api.url + events('acme', sub.body.id, sub.body.streamToken.token));
    expect(got.ended).toBe(true);
    expect(got.events.filter((e) => e.event === 'token').map((e) => e.data.text).join('')).toBe(content);
    expectExactly(seen(got.events), await fullLog(h, 'acme', sub.body.id));
    // Without asking, no token.
    expect((await acme.submit('tok-2b', 'no token')).body.streamToken).toBeUndefined();
  });

  it('of a session opens every run of that session, those submitted after it included, and no other', async () => {
    const before = await finishedRun(acme, 'tok-s');
    const { token, sessionId, runId } = (await acme.post('/sessions/tok-s/stream-token', {})).body;
    expect({ sessionId, runId }).toEqual({ sessionId: 'tok-s', runId: undefined });
    const after = await finishedRun(acme, 'tok-s');
    const elsewhere = await finishedRun(acme, 'tok-other');
    for (const runId of [before, after]) {
      const got = await readSse(api.url + events('acme', runId, token));
      expectExactly(seen(got.events), await fullLog(h, 'acme', runId));
    }
    expect(await answer(events('acme', elsewhere, token))).toEqual(await answer(events('acme', elsewhere)));
    // globex's session of the same name is another session: its token opens nothing of acme's.
    const globexToken = (await mint(globex, { sessionId: 'tok-s' })).token;
    expect(await answer(events('acme', before, globexToken))).toEqual(await answer(events('acme', before)));
  });

  it('for a run that does not exist is not minted, and for another scope’s run neither', async () => {
    const runId = await finishedRun(acme, 'tok-3');
    const missing = await acme.post('/runs/rdoesnotexist000000/stream-token', {});
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('RUN_NOT_FOUND');
    const foreign = await globex.post(`/runs/${runId}/stream-token`, {});
    expect({ status: foreign.status, body: foreign.body }).toEqual({ status: missing.status, body: missing.body });
    // A globex key on acme's path: the 404 every other route of another scope answers.
    expect((await call(api.url, 'POST', `/v1/scopes/acme/runs/${runId}/stream-token`, {}, globex.headers)).body.error.code).toBe('NOT_FOUND');
  });
});

describe('refused tokens', () => {
  it('another run’s, another scope’s, a forged one and a malformed one get exactly the answer no token gets', async () => {
    const runA = await finishedRun(acme, 'ref-a');
    const runB = await finishedRun(acme, 'ref-b');
    const runG = await finishedRun(globex, 'ref-g');
    const tokenB = (await mint(acme, { runId: runB })).token;
    const tokenG = (await mint(globex, { runId: runG })).token;
    const none = await answer(events('acme', runA));
    expect(none.status).toBe(401);
    expect(none.body.error.code).toBe('UNAUTHENTICATED');
    expect(none.wwwAuthenticate).toBe('Bearer');
    const forged = `bst_${'A'.repeat(43)}`;
    for (const [what, path] of [
      ['a token of another run', events('acme', runA, tokenB)],
      ['a token of another scope', events('acme', runA, tokenG)],
      ['another scope’s token on its own run id under this scope', events('acme', runG, tokenG)],
      ['a token on another scope’s path', events('globex', runG, tokenB)],
      ['a forged token', events('acme', runA, forged)],
      ['a malformed token', events('acme', runA, 'nope')],
      ['an empty token', events('acme', runA, '')],
      ['a token twice', `${events('acme', runA, tokenB)}&access_token=${tokenB}`],
      ['a token of a run that does not exist', events('acme', 'rdoesnotexist000000', tokenB)],
    ] as const) {
      expect(await answer(path), what).toEqual(none);
    }
    // The tokens themselves still work where they belong.
    expect((await readSse(api.url + events('acme', runB, tokenB))).ended).toBe(true);
    expect((await readSse(api.url + events('globex', runG, tokenG))).ended).toBe(true);
  });

  it('expired: refused alike once its expiresAt passed', async () => {
    const short = await h.startApi({ STREAM_TOKEN_TTL_MS: '1000' });
    const runId = await finishedRun(acme, 'ref-exp');
    const res = await call(short.url, 'POST', `/v1/scopes/acme/runs/${runId}/stream-token`, {}, acme.headers);
    expect(res.status).toBe(201);
    const { token, expiresAt } = res.body as { token: string; expiresAt: string };
    // A real token: Redis holds its hash, set to expire exactly at the expiresAt it was given with.
    const record = h.keys.scope('acme').capability(createHash('sha256').update(token).digest('hex'));
    expect(Number(await h.redis.call('pexpiretime', record))).toBe(Date.parse(expiresAt));
    await waitFor(async () => (await redisNowMs(h.redis)) > Date.parse(expiresAt), 10_000, 'the token to expire');
    expect(await answer(events('acme', runId, token))).toEqual(await answer(events('acme', runId)));
  });

  it('minted by a key that is then revoked: refused alike, while the tokens of other keys keep working', async () => {
    const runId = await finishedRun(acme, 'ref-rev');
    const store = new ApiKeyStore(h.redis, h.keys);
    const doomed = await store.create('acme', 'client');
    const auth = { authorization: `Bearer ${doomed.key}` };
    const minted = await call(api.url, 'POST', `/v1/scopes/acme/runs/${runId}/stream-token`, {}, auth);
    const token = minted.body.token as string;
    const kept = (await mint(acmeClient, { runId })).token;
    expect((await readSse(api.url + events('acme', runId, token))).ended).toBe(true);
    expect(await store.revoke(doomed.id)).toBe(true);
    expect(await answer(events('acme', runId, token))).toEqual(await answer(events('acme', runId)));
    expect((await readSse(api.url + events('acme', runId, kept))).ended).toBe(true);
  });

  it('used to submit, cancel, resolve or mint, in the query or as a key: 401, and nothing changes', async () => {
    // A run that stays queued (no worker serves its runtime), so a cancel would show.
    const queued = await acme.submit('ref-write', 'waits', { runtime: `${h.runtime}-nobody` });
    const runId = queued.body.id as string;
    const { token } = await mint(acme, { runId });
    const q = `?access_token=${token}`;
    const asKey = { authorization: `Bearer ${token}` };
    const attempts: [string, string, unknown][] = [
      ['POST', `/v1/scopes/acme/runs${q}`, { sessionId: 'ref-write', input: { content: 'forged' }, runtime: h.runtime }],
      ['POST', `/v1/scopes/acme/runs/${runId}/cancel${q}`, {}],
      ['POST', `/v1/scopes/acme/runs/${runId}/steps/step:charge:1/resolve${q}`, { value: 1 }],
      ['POST', `/v1/scopes/acme/runs/${runId}/stream-token${q}`, {}],
      ['POST', `/v1/scopes/acme/sessions/ref-write/stream-token${q}`, {}],
      ['GET', `/v1/scopes/acme/runs/${runId}${q}`, undefined],
    ];
    for (const [method, path, body] of attempts) {
      for (const headers of [{}, asKey]) {
        const got = await answer(path, { method, body, headers });
        expect(got.status, `${method} ${path} ${JSON.stringify(headers)}`).toBe(401);
        expect(got.body.error.code).toBe('UNAUTHENTICATED');
      }
    }
    const run = (await acme.get(`/runs/${runId}`)).body;
    expect(run.status).toBe('queued');
    expect(run.cancelRequested).toBeUndefined();
    expect((await acme.get('/runs?sessionId=ref-write')).body.runs).toHaveLength(1);
    // Nor as a key on the events route itself: a token is read from access_token only.
    expect((await answer(events('acme', runId), { headers: asKey })).status).toBe(401);
  });
});

describe('minting', () => {
  it('is limited per scope to STREAM_TOKEN_MINT_PER_MIN (600) a minute: then 429 STREAM_TOKEN_RATE_LIMITED with Retry-After, other scopes unaffected', async () => {
    // Before, one key minted 20,000 in 13 s, each a record kept STREAM_TOKEN_TTL_MS.
    const minter = await h.client(api.url, 'minting', 'client');
    const limit = 600;
    const firstMinute = Math.floor((await redisNowMs(h.redis)) / 60_000);
    let accepted = 0;
    let refused: { status: number; body: any; headers: Headers } | undefined;
    // A fixed window: across the turn of a minute a scope mints at most twice the limit.
    while (accepted <= 2 * limit) {
      const res = await minter.post(`/sessions/s${accepted % 7}/stream-token`, {});
      if (res.status !== 201) {
        refused = res;
        break;
      }
      accepted++;
    }
    const lastMinute = Math.floor((await redisNowMs(h.redis)) / 60_000);
    expect(refused?.status).toBe(429);
    expect(refused?.body.error.code).toBe('STREAM_TOKEN_RATE_LIMITED');
    const retryAfter = Number(refused?.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    if (firstMinute === lastMinute) expect(accepted).toBe(limit);
    else expect(accepted).toBeLessThanOrEqual(2 * limit);
    // Every token minted is a record; the refused one made none.
    const records = (await h.allKeys()).filter((k) => k.startsWith(`${h.keys.scope('minting').base}cap:`));
    expect(records.length).toBe(accepted);
    // Another scope mints as before, and a submit's own token is not refused.
    await mint(globex, { sessionId: 'unaffected' });
    const sub = await minter.post('/runs', { sessionId: 'with-token', input: { content: 'hi' }, streamToken: true });
    expect(sub.status).toBe(202);
    expect(sub.body.streamToken.token).toMatch(/^bst_/);
    expect(h.config.STREAM_TOKEN_MINT_PER_MIN).toBe(limit);
  });
});

describe('CORS', () => {
  const corsHeaders = (headers: Headers) => [...headers.keys()].filter((k) => k.startsWith('access-control-')).sort();

  it('answers a listed origin on the events route, preflight included, with helmet’s headers intact', async () => {
    const runId = await finishedRun(acme, 'cors-1');
    const { token } = await mint(acme, { runId });
    const pre = await call(api.url, 'OPTIONS', events('acme', runId, token), undefined, {
      origin: PAGE, 'access-control-request-method': 'GET', 'access-control-request-headers': 'last-event-id',
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe(PAGE);
    expect(pre.headers.get('access-control-allow-methods')).toBe('GET');
    expect(pre.headers.get('access-control-allow-headers')).toBe('Last-Event-ID');
    expect(pre.headers.get('access-control-allow-credentials')).toBeNull();
    expect(pre.headers.get('vary')).toMatch(/Origin/);

    const res = await fetch(api.url + events('acme', runId, token), { headers: { origin: PAGE, 'last-event-id': '0-1' } });
    await res.text();
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBe(PAGE);
    expect(res.headers.get('vary')).toMatch(/Origin/);
    // helmet's, as on every answer of the API.
    expect(res.headers.get('content-security-policy')).toContain("default-src 'self'");
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('cross-origin-resource-policy')).toBe('same-origin');
    expect(res.headers.get('strict-transport-security')).toBeTruthy();

    // A refusal is readable by the page too (so it can tell a dead token from a dead network).
    const refused = await call(api.url, 'GET', events('acme', runId, 'nope'), undefined, { origin: PAGE });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('access-control-allow-origin')).toBe(PAGE);
  });

  it('gives an origin not listed, and every other route, no CORS header at all', async () => {
    const runId = await finishedRun(acme, 'cors-2');
    const { token } = await mint(acme, { runId });
    for (const origin of ['http://evil.example', 'http://page.example', 'https://page.example:8080', 'null']) {
      const pre = await call(api.url, 'OPTIONS', events('acme', runId, token), undefined, { origin, 'access-control-request-method': 'GET' });
      expect(corsHeaders(pre.headers), origin).toEqual([]);
      const res = await fetch(api.url + events('acme', runId, token), { headers: { origin } });
      await res.text();
      expect(res.status).toBe(200);
      expect(corsHeaders(res.headers), origin).toEqual([]);
    }
    // Routes a token does not open are not offered to pages of other origins, listed or not.
    for (const [method, path] of [['GET', `/runs/${runId}`], ['POST', '/runs'], ['POST', `/runs/${runId}/stream-token`]]) {
      const pre = await call(api.url, 'OPTIONS', `/v1/scopes/acme${path}`, undefined, { origin: PAGE, 'access-control-request-method': method });
      expect(corsHeaders(pre.headers), `${method} ${path}`).toEqual([]);
    }
    const get = await call(api.url, 'GET', `/v1/scopes/acme/runs/${runId}`, undefined, { ...acme.headers, origin: PAGE });
    expect(get.status).toBe(200);
    expect(corsHeaders(get.headers)).toEqual([]);
  });

  it('is off with CORS_ORIGINS empty (the default)', async () => {
    const plain = await h.startApi({ CORS_ORIGINS: '' });
    const runId = await finishedRun(acme, 'cors-3');
    const { token } = await mint(acme, { runId });
    const pre = await call(plain.url, 'OPTIONS', events('acme', runId, token), undefined, { origin: PAGE, 'access-control-request-method': 'GET' });
    expect(corsHeaders(pre.headers)).toEqual([]);
    const res = await fetch(plain.url + events('acme', runId, token), { headers: { origin: PAGE } });
    await res.text();
    expect(res.status).toBe(200);
    expect(corsHeaders(res.headers)).toEqual([]);
  });
});
