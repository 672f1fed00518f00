import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { ScopeRole } from '../src/lib/tenancy/api-keys.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { keySpaceOf } from './helpers/key-space.ts';
import { tenancyAgents } from './helpers/tenancy-agents.ts';

// Each test walks every route for several keys, one request after another: on a 2-core machine
// running other suites beside this one the matrix ran past the 60 s default.
vi.setConfig({ testTimeout: 180_000 });

/**
 * Invariant 9, route by route. The routes come from /openapi.json (which test/openapi.test.ts
 * holds equal to what Express serves), so a route added later is in this matrix by itself.
 * Scope A (`acme`) has a finished run, a blocked run, a waiting run and a queued run; scope B
 * (`globex`) tries every route on A's objects with both of its roles. Nothing may answer anything but a
 * 404 that looks exactly like the one for an object that does not exist, and A's keys in Redis
 * must stay byte for byte the same. Sweepers are off, so nothing else writes A's keys meanwhile.
 */
let h: Harness;
let url: string;
let routes: { method: string; path: string; access: string }[];
const ids: Record<string, string> = { scope: 'acme', sessionId: 'm1', chatId: 'm1', bucket: 'matrix:bucket' };

beforeAll(async () => {
  // No rate-limit bucket either: it expires by itself once full, which would look like a change.
  h = await useHarness({
    SWEEP_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0', RATE_LIMITS: 'matrix:bucket=rpm:10', SCHEDULE_POLL_MS: '0',
    BULK_POLL_MS: '0',
  });
  url = (await h.startApi()).url;
  const worker = await h.startWorker({ agents: tenancyAgents });
  const acme = await h.client(url, 'acme');
  const done = await acme.submit('m1', 'a finished run of acme');
  const blocked = await acme.submit('m2', 'x', { agent: 'charge' });
  const waiting = await acme.submit('m4', 'prod', { agent: 'approve' });
  await acme.waitStatus(done.body.id, ['succeeded']);
  // A re-run of it, ended: the listing by rerunOf has one run on acme.
  const rerun = await acme.post(`/runs/${done.body.id}/rerun`, {});
  expect(rerun.status).toBe(202);
  await acme.waitStatus(rerun.body.id, ['succeeded']);
  const b = await acme.waitStatus(blocked.body.id, ['blocked']);
  const w = await acme.waitStatus(waiting.body.id, ['waiting']);
  // globex has a waiting run of its own: its token must open nothing of acme's.
  const globex = await h.client(url, 'globex');
  const gw = await globex.waitStatus((await globex.submit('m4', 'prod', { agent: 'approve' })).body.id, ['waiting']);
  const queued = await acme.submit('m3', 'waits for a runtime nobody serves', { runtime: `${h.runtime}-none` });
  expect(queued.status).toBe(202);
  await worker.close();
  // A schedule of acme's (its first tick months ahead; no scheduler runs here anyway).
  const schedule = await (await h.client(url, 'acme', 'admin')).post('/schedules', SCHEDULE_BODY);
  expect(schedule.status).toBe(201);
  Object.assign(ids, { scheduleId: schedule.body.id });
  // A bulk operation of acme's (no process advances one here: BULK_POLL_MS 0).
  const operation = await (await h.client(url, 'acme', 'admin')).post('/runs/cancel', BULK_BODY);
  expect(operation.status).toBe(202);
  Object.assign(ids, { operationId: operation.body.id });
  Object.assign(ids, {
    runId: done.body.id, blockedRunId: b.id, stepKey: b.blocked.stepKey, runtimeId: h.runtime,
    waitingRunId: w.id, waitKey: w.waits[0].key, token: w.waits[0].token, globexToken: gw.waits[0].token,
  });

  const doc = (await call(url, 'GET', '/openapi.json')).body;
  routes = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
    Object.entries(ops).map(([method, op]) => ({ method: method.toUpperCase(), path, access: op['x-baton-access'] })),
  );
});

/** Every key of scope `scope` with a digest of its value. */
async function scopeState(scope: string): Promise<[string, string][]> {
  const keys = (await h.allKeys()).filter((k) => k.startsWith(`${h.prefix}:{${scope}}:`)).sort();
  const out: [string, string][] = [];
  for (const k of keys) {
    const dump = await h.redis.dumpBuffer(k);
    out.push([k, dump ? createHash('sha1').update(dump).digest('hex') : 'gone']);
  }
  return out;
}

/** The route's URL for `scope`, with `values` for its other parameters. */
function urlFor(path: string, scope: string, values: Record<string, string>): string {
  return path.replace(/\{(\w+)\}/g, (_, p: string) => {
    if (p === 'scope') return scope;
    // The blocked run is the one a resolve applies to, the waiting run the one a resume does.
    const v = p === 'runId' && path.includes('/resolve') ? values.blockedRunId
      : p === 'runId' && path.includes('/waits/') ? values.waitingRunId : values[p];
    if (v === undefined) throw new Error(`no test value for path parameter {${p}} of ${path}: add one to this matrix`);
    return encodeURIComponent(v);
  });
}

const BULK_BODY = { filter: { sessionId: 'm-bulk', status: ['queued'] } };

const SCHEDULE_BODY = { cron: '0 0 1 1 *', run: { sessionId: 'm1', input: { content: 'a schedule of the matrix' } } };

/** A body the route would accept from its own scope. */
function bodyFor(method: string, path: string): unknown {
  if (path.endsWith('/limits') && method === 'PUT') return { maxActive: 100_000, submitBurst: 1_000_000 };
  if (path.endsWith('/runs') && method === 'POST') return { sessionId: 'm1', input: { content: 'hijack' }, runtime: h.runtime };
  if (path.endsWith('/resolve')) return { value: 'forged' };
  // A regenerate of acme's finished turn: on B's own scope it names no run of B's (an answer
  // that streamed would wait for a worker this matrix does not run).
  if (path.endsWith('/chat')) {
    return { id: 'm1', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hijack' }] }], trigger: 'regenerate-message', messageId: ids.runId };
  }
  if (path.includes('/waits/')) return { value: { approved: true } };
  if (path.endsWith('/drain') && method === 'POST') return { cancelQueued: true };
  if (path.endsWith('/schedules') && method === 'POST') return SCHEDULE_BODY;
  if (path.endsWith('/runs/cancel')) return BULK_BODY;
  if (path.endsWith('/runs/rerun')) return { filter: { sessionId: 'm-bulk', status: ['cancelled'] } };
  // A fork of the session into one of its own: on scope B, B's own session m1 has no turn.
  if (path.endsWith('/fork')) return { atTurn: 1, sessionId: 'm1-fork' };
  if (method === 'POST') return {};
  return undefined;
}

/** A GET's status and headers, its body left unread. */
async function head(path: string, key: string) {
  const stop = new AbortController();
  const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${key}` }, signal: stop.signal });
  stop.abort();
  return { status: res.status, headers: res.headers, body: {} as Record<string, any> };
}

const send = async (method: string, path: string, key: string | undefined) =>
  call(url, method, path, bodyFor(method, path), key ? { authorization: `Bearer ${key}` } : {});

describe('a key of scope B on scope A', () => {
  it('gets on every route the same 404 a missing object gets, and A is unchanged', async () => {
    const scoped = routes.filter((r) => r.path.includes('{scope}'));
    expect(scoped.length).toBeGreaterThanOrEqual(11);
    expect(scoped.every((r) => r.access !== 'public')).toBe(true);
    const before = await scopeState('acme');
    expect(before.length).toBeGreaterThan(5);
    const missing = {
      ...ids, runId: 'rdoesnotexist000000', blockedRunId: 'rdoesnotexist000001', waitingRunId: 'rdoesnotexist000002',
      sessionId: 'nobody', runtimeId: 'nowhere', scheduleId: 'schdoesnotexist0', operationId: 'opdoesnotexist0',
    };
    let checked = 0;
    for (const r of scoped) {
      for (const role of ['client', 'admin'] as ScopeRole[]) {
        const key = await h.key('globex', role);
        const onReal = await send(r.method, urlFor(r.path, 'acme', ids), key);
        const onMissing = await send(r.method, urlFor(r.path, 'acme', missing), key);
        const onNoScope = await send(r.method, urlFor(r.path, 'no-such-scope', ids), key);
        const what = `${role} of globex: ${r.method} ${r.path}`;
        expect(onReal.status, what).toBe(404);
        expect(onReal.body.error.code, what).toBe('NOT_FOUND');
        expect(onMissing, what).toMatchObject({ status: onReal.status, body: onReal.body });
        expect(onNoScope, what).toMatchObject({ status: onReal.status, body: onReal.body });
        checked++;
      }
    }
    // A submit that asks for its event stream gets the same 404, as JSON.
    const streaming = await call(url, 'POST', urlFor('/v1/scopes/{scope}/runs', 'acme', ids), bodyFor('POST', '/runs'), {
      authorization: `Bearer ${await h.key('globex', 'client')}`, accept: 'text/event-stream',
    });
    expect(streaming).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
    console.log(`${checked} (route, role) pairs of scope B on scope A answered 404`);
    expect(await scopeState('acme')).toEqual(before);
  });

  it('on its own scope with A’s ids finds nothing of A, and A is unchanged', async () => {
    const before = await scopeState('acme');
    for (const r of routes.filter((x) => x.path.includes('{scope}'))) {
      // B's chat m1 runs B's turn made above (a submit on m1, for a worker this matrix does not
      // run): its answer would stream for ever, so its head is what is read.
      const res = r.path.endsWith('/chat/{chatId}/stream')
        ? await head(urlFor(r.path, 'globex', ids), await h.key('globex', 'admin'))
        : await send(r.method, urlFor(r.path, 'globex', ids), await h.key('globex', 'admin'));
      const what = `${r.method} ${r.path} on globex with acme's ids -> ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`;
      expect(res.status, what).toBeLessThan(500);
      if (r.path.includes('{runId}')) {
        expect(res.status, what).toBe(404);
        expect(res.body.error.code, what).toBe('RUN_NOT_FOUND');
      }
      if (r.path.endsWith('/sessions/{sessionId}/messages')) expect(res.body.messages, what).toEqual([]);
      // B's own chat m1 holds at most B's turn made above (a submit on m1), nothing of A's.
      if (r.path.endsWith('/chat/{chatId}/messages')) expect(JSON.stringify(res.body), what).not.toContain('of acme');
      if (r.path.endsWith('/chat/{chatId}/stop')) expect(res.body.run?.scope ?? 'globex', what).toBe('globex');
      if (r.path.endsWith('/chat')) expect(res.body.error?.code, what).toBe('RUN_NOT_FOUND');
      if (r.path.includes('{scheduleId}')) expect(res.body.error?.code, what).toBe('SCHEDULE_NOT_FOUND');
      if (r.path.includes('{operationId}')) expect(res.body.error?.code, what).toBe('OPERATION_NOT_FOUND');
      if (r.path.endsWith('/sessions/{sessionId}/fork')) expect(res.body.error?.code, what).toBe('TURN_NOT_FOUND');
      if (r.path.endsWith('/sessions/{sessionId}/stream-token')) {
        // globex's own session m1: its token opens nothing of acme's m1 (where acme's finished run is).
        expect(res.status, what).toBe(201);
        const foreign = await send('GET', `/v1/scopes/acme/runs/${ids.runId}/events?access_token=${res.body.token}`, undefined);
        expect(foreign, what).toMatchObject(await send('GET', `/v1/scopes/acme/runs/${ids.runId}/events`, undefined));
        expect(foreign.status, what).toBe(401);
        // Nor anything of acme's chat m1.
        for (const chatPath of ['/chat/m1/messages', '/chat/m1/stream']) {
          const chat = await send('GET', `/v1/scopes/acme${chatPath}?access_token=${res.body.token}`, undefined);
          expect(chat, what).toMatchObject(await send('GET', `/v1/scopes/acme${chatPath}`, undefined));
          expect(chat.status, what).toBe(401);
        }
      }
      if (r.path.endsWith('/stats')) expect(res.body.counts, what).toMatchObject({ succeeded: 0, blocked: 0 });
    }
    expect(await scopeState('acme')).toEqual(before);
  });
});

describe("the OpenAI-compatible API (the key's scope is the tenant)", () => {
  it("answers a key of scope B on A's response exactly as on one that never was, and A is unchanged", async () => {
    const openAi = routes.filter((r) => r.path.startsWith('/v1/responses') || r.path === '/v1/chat/completions');
    expect(openAi.length).toBeGreaterThanOrEqual(6);
    // A delete too: scope B's DELETE of A's response is the 404 of one that never was, and A keeps it.
    expect(openAi.map((r) => `${r.method} ${r.path}`)).toContain('DELETE /v1/responses/{responseId}');
    const before = await scopeState('acme');
    const real = `resp_${ids.runId}`;
    const missing = 'resp_rdoesnotexist000000';
    let checked = 0;
    for (const r of openAi.filter((x) => x.path.includes('{responseId}'))) {
      for (const role of ['client', 'admin'] as ScopeRole[]) {
        const key = await h.key('globex', role);
        const body = r.method === 'POST' ? {} : undefined;
        const auth = { authorization: `Bearer ${key}` };
        const onReal = await call(url, r.method, r.path.replace('{responseId}', real), body, auth);
        const onMissing = await call(url, r.method, r.path.replace('{responseId}', missing), body, auth);
        const what = `${role} of globex: ${r.method} ${r.path}`;
        expect(onReal.status, what).toBe(404);
        expect(onReal.body.error.type, what).toBe('invalid_request_error');
        expect(JSON.stringify(onReal.body).replaceAll(real, missing), what).toBe(JSON.stringify(onMissing.body));
        checked++;
      }
    }
    // Continuing A's conversation from B: the same 404 as an id that never was.
    const key = await h.key('globex', 'client');
    const cont = (id: string) => call(url, 'POST', '/v1/responses', { model: 'echo', input: 'hijack', previous_response_id: id }, { authorization: `Bearer ${key}` });
    const [onReal, onMissing] = [await cont(real), await cont(missing)];
    expect(onReal.status).toBe(404);
    expect(JSON.stringify(onReal.body).replaceAll(real, missing)).toBe(JSON.stringify(onMissing.body));
    console.log(`${checked} (OpenAI route, role) pairs of scope B on A's response answered 404`);
    expect(await scopeState('acme')).toEqual(before);
  });

  it('refuses an operator key (bound to no scope) with 403 on every route, and no key with 401', async () => {
    const operator = await h.operatorKey();
    for (const r of routes.filter((x) => x.path.startsWith('/v1/responses') || x.path === '/v1/chat/completions')) {
      const path = r.path.replace('{responseId}', `resp_${ids.runId}`);
      const body = r.path === '/v1/responses' ? { model: 'echo', input: 'x' }
        : r.path === '/v1/chat/completions' ? { model: 'echo', messages: [{ role: 'user', content: 'x' }] }
          : r.method === 'POST' ? {} : undefined;
      const byOperator = await call(url, r.method, path, body, { authorization: `Bearer ${operator}` });
      expect(byOperator.status, `${r.method} ${r.path}`).toBe(403);
      const none = await call(url, r.method, path, body, {});
      expect(none.status, `${r.method} ${r.path}`).toBe(401);
      expect(none.body.error.code, `${r.method} ${r.path}`).toBe('invalid_api_key');
    }
  });
});

/** One JSON-RPC message POSTed to /mcp with `key`, and the message it is answered with (SSE or JSON). */
async function mcp(method: string, params: Record<string, unknown>, key: string | undefined) {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json', accept: 'application/json, text/event-stream',
      ...(key ? { authorization: `Bearer ${key}` } : {}),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method, params }),
  });
  const text = await res.text();
  const data = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
  return { status: res.status, body: data.length ? data.at(-1) : JSON.parse(text) };
}

describe("MCP's tasks (the key's scope is the tenant)", () => {
  it("answers a key of scope B on A's runs exactly as on a task that never was, lists none of them, and A is unchanged", async () => {
    const before = await scopeState('acme');
    const missing = 'rdoesnotexist000000';
    let checked = 0;
    for (const role of ['client', 'admin'] as ScopeRole[]) {
      const key = await h.key('globex', role);
      for (const id of [ids.runId, ids.blockedRunId, ids.waitingRunId]) {
        for (const method of ['tasks/get', 'tasks/result', 'tasks/cancel']) {
          const what = `${role} of globex: ${method} on ${id}`;
          const onReal = await mcp(method, { taskId: id }, key);
          const onMissing = await mcp(method, { taskId: missing }, key);
          expect(onReal.status, what).toBe(200);
          expect(onReal.body.error?.message, what).toMatch(/not found/i);
          expect(JSON.stringify(onReal.body).replaceAll(id, missing), what).toBe(JSON.stringify(onMissing.body));
          checked++;
        }
      }
      // B's own runs only (its waiting run, what the routes above made on B): each one B's API finds.
      const listed = (await mcp('tasks/list', {}, key)).body.result.tasks as { taskId: string }[];
      expect(listed.length, `${role} of globex: tasks/list`).toBeGreaterThan(0);
      for (const { taskId } of listed) {
        expect([ids.runId, ids.blockedRunId, ids.waitingRunId], `${role} of globex: tasks/list`).not.toContain(taskId);
        expect((await send('GET', `/v1/scopes/globex/runs/${taskId}`, key)).status, `${role} of globex: ${taskId}`).toBe(200);
      }
    }
    // A's own key finds them: the answers above are scope B's, not the store's.
    const own = await mcp('tasks/get', { taskId: ids.blockedRunId }, await h.key('acme', 'client'));
    expect(own.body.result).toMatchObject({ taskId: ids.blockedRunId, status: 'working' });
    console.log(`${checked} (MCP task method, run, role) triples of scope B on A's runs answered "not found"`);
    expect(await scopeState('acme')).toEqual(before);
  });

  it('refuses an operator key with 403 and no key with 401, before any message is read', async () => {
    const operator = await mcp('tasks/get', { taskId: ids.runId }, await h.operatorKey());
    expect(operator).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    const none = await mcp('tasks/get', { taskId: ids.runId }, undefined);
    expect(none).toMatchObject({ status: 401, body: { error: { code: 'UNAUTHENTICATED' } } });
  });
});

describe('the run listing filters of scope B', () => {
  it('read only B’s indexes: A’s agent, runtime, session, status and re-runs list nothing of A, and A is unchanged', async () => {
    const before = await scopeState('acme');
    // acme has a `charge` run (blocked) and a run on a runtime nobody serves; globex has neither.
    const filters = [
      'agent=charge', `runtime=${h.runtime}-none`, 'sessionId=m2', 'status=blocked', `agent=charge&runtime=${h.runtime}&status=blocked`,
      `rerunOf=${ids.runId}`,
    ];
    const own = await h.key('acme', 'client');
    for (const query of filters) {
      const mine = await send('GET', `/v1/scopes/acme/runs?${query}`, own);
      expect(mine.body.runs.length, `acme: ${query}`).toBe(1);
      for (const role of ['client', 'admin'] as ScopeRole[]) {
        const key = await h.key('globex', role);
        const onOwn = await send('GET', `/v1/scopes/globex/runs?${query}`, key);
        expect(onOwn, `${role} of globex on globex: ${query}`).toMatchObject({ status: 200, body: { runs: [], nextCursor: null } });
        const onA = await send('GET', `/v1/scopes/acme/runs?${query}`, key);
        expect(onA, `${role} of globex on acme: ${query}`).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
      }
    }
    expect(await scopeState('acme')).toEqual(before);
  });
});

describe('the pages of scope B', () => {
  it('with A’s cursors and page sizes read nothing of A: 404 on A, B’s own (empty) pages on B, and A is unchanged', async () => {
    const before = await scopeState('acme');
    const own = await h.key('acme', 'admin');
    // A page of one of each listing on acme, and the cursor it gives (or one of its form).
    const paged = [
      [`/sessions/${ids.sessionId}/messages?limit=1`, 'messages', '1'], ['/runs?limit=1', 'runs', '1_x'],
      [`/runs/${ids.runId}/steps?limit=1`, 'steps', '1'], ['/usage?from=2024-01-01&to=2024-12-31&limit=1', 'rows', '2024-01-01.1'],
    ] as const;
    for (const [path, items, form] of paged) {
      const first = await send('GET', `/v1/scopes/acme${path}`, own);
      expect(first.status, path).toBe(200);
      const cursor = first.body.nextCursor ?? form;
      for (const role of ['client', 'admin'] as ScopeRole[]) {
        const key = await h.key('globex', role);
        const page = `${path}&cursor=${encodeURIComponent(cursor)}`;
        const onA = await send('GET', `/v1/scopes/acme${page}`, key);
        expect(onA, `${role} of globex on acme: ${page}`).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
        const onB = await send('GET', `/v1/scopes/globex${page}`, key);
        const what = `${role} of globex on globex: ${page} -> ${onB.status}`;
        if (path.includes('/steps')) expect(onB.body.error?.code, what).toBe('RUN_NOT_FOUND');
        else if (path.startsWith('/usage') && role === 'client') expect(onB.status, what).toBe(403);
        else if (items !== 'runs') expect(onB.body[items], what).toEqual([]);
      }
    }
    expect(await scopeState('acme')).toEqual(before);
  });
});

describe('a resume token', () => {
  it('of another scope, or altered to name another scope, answers the 404 of a token that never existed, and A is unchanged', async () => {
    const tokenRoutes = routes.filter((r) => r.access === 'token');
    expect(tokenRoutes.map((r) => `${r.method} ${r.path}`)).toEqual(['POST /v1/waits/{token}']);
    const before = await scopeState('acme');
    const made = `bwt_acme.${'A'.repeat(43)}`;
    const nobody = await call(url, 'POST', `/v1/waits/${made}`, { value: { approved: true } });
    expect(nobody.status).toBe(404);
    const forged = [
      ids.token.replace('bwt_acme.', 'bwt_globex.'),
      ids.globexToken.replace('bwt_globex.', 'bwt_acme.'),
      ids.token.replace('bwt_acme.', 'bwt_no-such-scope.'),
    ];
    for (const token of forged) {
      for (const key of [undefined, await h.key('acme', 'admin'), await h.key('globex', 'admin')]) {
        const res = await call(url, 'POST', `/v1/waits/${encodeURIComponent(token)}`, { value: { approved: true } },
          key ? { authorization: `Bearer ${key}` } : {});
        expect(res, token).toMatchObject({ status: nobody.status, body: nobody.body });
      }
      // Opened before the body is read: a body that is not even JSON changes nothing of the answer.
      const malformed = await call(url, 'POST', `/v1/waits/${encodeURIComponent(token)}`, '{"value": nope', { 'content-type': 'application/json' });
      expect(malformed, `${token} with a malformed body`).toMatchObject({ status: nobody.status, body: nobody.body });
    }
    // A token is no key: as a Bearer key on every route of its own scope it is refused.
    for (const r of routes.filter((x) => x.path.includes('{scope}'))) {
      const res = await send(r.method, urlFor(r.path, 'acme', ids), ids.token);
      expect(res.status, `${r.method} ${r.path} with a token as key`).toBe(401);
    }
    expect(await scopeState('acme')).toEqual(before);
    // The token itself opens its wait, once.
    expect((await call(url, 'POST', `/v1/waits/${encodeURIComponent(ids.token)}`, { value: { approved: false } })).status).toBe(200);
    expect((await call(url, 'POST', `/v1/waits/${encodeURIComponent(ids.token)}`, { value: { approved: true } })).status).toBe(409);
  });
});

describe('an operator key', () => {
  it('gets 403 FORBIDDEN on every route of a scope but the operator routes, real ids or not, and A is unchanged', async () => {
    const operator = await h.operatorKey();
    const before = await scopeState('acme');
    const missing = { ...ids, runId: 'rdoesnotexist000000', blockedRunId: 'rdoesnotexist000001', waitingRunId: 'rdoesnotexist000002' };
    let refused = 0;
    for (const r of routes.filter((x) => x.path.includes('{scope}'))) {
      const what = `operator: ${r.method} ${r.path}`;
      if (r.access === 'operator' || r.access === 'admin-or-operator') {
        // Its own routes: read here (what a change does is test/scope-limits.test.ts's).
        if (r.method === 'GET') expect((await send(r.method, urlFor(r.path, 'acme', ids), operator)).status, what).toBe(200);
        continue;
      }
      const onReal = await send(r.method, urlFor(r.path, 'acme', ids), operator);
      expect([onReal.status, onReal.body.error.code], what).toEqual([403, 'FORBIDDEN']);
      expect(await send(r.method, urlFor(r.path, 'acme', missing), operator), what).toMatchObject({ status: 403, body: onReal.body });
      expect(await send(r.method, urlFor(r.path, 'no-such-scope', ids), operator), what).toMatchObject({ status: 403, body: onReal.body });
      refused++;
    }
    // A submit that asks for its event stream is refused the same, as JSON.
    const streaming = await call(url, 'POST', urlFor('/v1/scopes/{scope}/runs', 'acme', ids), bodyFor('POST', '/runs'), {
      authorization: `Bearer ${operator}`, accept: 'text/event-stream',
    });
    expect(streaming).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    console.log(`${refused} routes of a scope refused an operator key`);
    expect(refused).toBeGreaterThanOrEqual(11);
    expect(await scopeState('acme')).toEqual(before);
  });
});

describe('the operator routes outside a scope', () => {
  it('refuse every key of a scope, of either role, with 403 (401 without a key), and change nothing anywhere', async () => {
    const unscoped = routes.filter((r) => r.access === 'operator' && !r.path.includes('{scope}'));
    expect(unscoped.map((r) => `${r.method} ${r.path}`)).toEqual(expect.arrayContaining([
      'GET /v1/rate-limits', 'POST /v1/rate-limits/{bucket}/pause', 'DELETE /v1/rate-limits/{bucket}/pause',
    ]));
    const space = keySpaceOf(() => h);
    const before = await space.snapshot();
    for (const r of unscoped) {
      for (const scope of ['acme', 'globex']) {
        for (const role of ['client', 'admin'] as ScopeRole[]) {
          const res = await send(r.method, urlFor(r.path, scope, ids), await h.key(scope, role));
          expect([res.status, res.body.error?.code], `${role} of ${scope}: ${r.method} ${r.path}`).toEqual([403, 'FORBIDDEN']);
        }
      }
      expect((await send(r.method, urlFor(r.path, 'acme', ids), undefined)).status, `${r.method} ${r.path}`).toBe(401);
    }
    space.expectUnchanged(await space.snapshot(), before, 'the operator routes, refused');
    // The operator's own key reads them.
    const list = await send('GET', '/v1/rate-limits', await h.operatorKey());
    expect(list).toMatchObject({ status: 200, body: { buckets: [{ bucket: 'matrix:bucket', rpm: 10, paused: null }] } });
  });
});

describe('within scope A', () => {
  it('no key is 401, a client key on an admin or operator route is 403, an admin key on an operator-only route is 403, and none changes anything', async () => {
    const before = await scopeState('acme');
    const client = await h.key('acme', 'client');
    const admin = await h.key('acme', 'admin');
    for (const r of routes.filter((x) => x.path.includes('{scope}'))) {
      const what = `${r.method} ${r.path}`;
      const anonymous = await send(r.method, urlFor(r.path, 'acme', ids), undefined);
      expect(anonymous.status, what).toBe(401);
      expect(anonymous.body.error.code, what).toBe('UNAUTHENTICATED');
      expect(anonymous.headers.get('www-authenticate'), what).toBe('Bearer');
      const wrong = await send(r.method, urlFor(r.path, 'acme', ids), 'bk_this-key-was-never-issued-000000');
      expect(wrong.status, what).toBe(401);
      if (r.access === 'admin' || r.access === 'operator' || r.access === 'admin-or-operator') {
        const res = await send(r.method, urlFor(r.path, 'acme', ids), client);
        expect(res.status, what).toBe(403);
        expect(res.body.error.code, what).toBe('FORBIDDEN');
      }
      if (r.access === 'operator') {
        const res = await send(r.method, urlFor(r.path, 'acme', ids), admin);
        expect([res.status, res.body.error.code], `admin: ${what}`).toEqual([403, 'FORBIDDEN']);
      }
    }
    expect(await scopeState('acme')).toEqual(before);
  });
});

describe('a stream token of scope A', () => {
  it('opens its run’s events and nothing else: every other route, run and scope answers as if it were absent, and A is unchanged', async () => {
    const acme = await h.client(url, 'acme', 'client');
    const runToken = (await acme.post(`/runs/${ids.runId}/stream-token`, {})).body.token as string;
    const sessionToken = (await acme.post('/sessions/m1/stream-token', {})).body.token as string;
    const before = await scopeState('acme');
    const withToken = (path: string, token: string) => `${path}${path.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(token)}`;
    let opened = 0;
    let chats = 0;
    for (const token of [runToken, sessionToken]) {
      for (const r of routes.filter((x) => x.path.includes('{scope}'))) {
        for (const [scope, values] of [['acme', ids], ['globex', ids], ['acme', { ...ids, runId: ids.blockedRunId }]] as const) {
          const path = urlFor(r.path, scope, values);
          const what = `${r.method} ${path} with a token of acme's ${ids.runId}`;
          const absent = await send(r.method, path, undefined);
          const inQuery = await send(r.method, withToken(path, token), undefined);
          const asKey = await send(r.method, path, token);
          expect(asKey.status, `${what} (as a key)`).toBe(401);
          // A chat's routes name its session: the session's token opens them (no turn runs in m1: 204 for its stream).
          if (r.access === 'stream' && r.path.includes('{chatId}') && token === sessionToken && scope === 'acme') {
            expect(inQuery.status, what).toBe(r.path.endsWith('/stream') ? 204 : 200);
            chats++;
            continue;
          }
          if (r.access === 'stream' && !r.path.includes('{chatId}') && scope === 'acme' && values.runId === ids.runId) {
            expect(inQuery.status, what).toBe(200);
            expect(inQuery.headers.get('content-type'), what).toMatch(/^text\/event-stream/);
            opened++;
            continue;
          }
          expect(inQuery.status, what).toBe(401);
          expect(inQuery.body, what).toEqual(absent.body);
          expect(inQuery.headers.get('www-authenticate'), what).toBe(absent.headers.get('www-authenticate'));
        }
      }
    }
    expect(opened).toBe(2);
    // GET …/chat/m1/stream and …/messages, each with acme's two run ids.
    expect(chats).toBe(4);
    expect(await scopeState('acme')).toEqual(before);
  });
});

describe("a scope's quotas", () => {
  it('are its own: B spending its stream-token, artifact and scheduled-run quotas, and trying A’s paths, leaves A unchanged and A’s quotas whole', async () => {
    const api = await h.startApi({
      SWEEP_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0', STREAM_TOKEN_MINT_PER_MIN: '10', ARTIFACT_SCOPE_MAX_BYTES: '16',
      ARTIFACT_UPLOAD_BYTES_PER_SEC: '0', SCHEDULED_MAX_PER_SCOPE: '1',
    });
    const globex = await h.client(api.url, 'globex', 'client');
    const acme = await h.client(api.url, 'acme', 'client');
    const upload = (c: { scope: string; headers: Record<string, string> }, scope: string, body: string) =>
      fetch(`${api.url}/v1/scopes/${scope}/artifacts`, { method: 'POST', body, headers: c.headers })
        .then(async (r) => ({ status: r.status, body: await r.json() as any }));
    const later = { delayMs: 3_600_000 };
    const before = await scopeState('acme');
    // B up to each of its quotas (the tests above spent some of them already), then one more.
    const spend = async (attempt: (i: number) => Promise<{ status: number; body: any }>, code: string) => {
      for (let i = 0; i < 20; i++) {
        const res = await attempt(i);
        if (res.status >= 400) return expect(res.body.error.code).toBe(code);
      }
      throw new Error(`${code}: never refused`);
    };
    await spend((i) => globex.post(`/sessions/q${i}/stream-token`, {}), 'STREAM_TOKEN_RATE_LIMITED');
    await spend(() => upload(globex, 'globex', 'x'.repeat(4)), 'ARTIFACT_QUOTA_EXCEEDED');
    await spend(() => globex.submit('q-plan', 'later', later), 'TOO_MANY_SCHEDULED_RUNS');
    // B's key on A's paths: the 404 of a path it may not see, counted nowhere.
    const onA = (path: string, body: unknown) => call(api.url, 'POST', `/v1/scopes/acme${path}`, body, globex.headers);
    expect((await onA(`/runs/${ids.runId}/stream-token`, {})).status).toBe(404);
    expect((await onA('/sessions/m1/stream-token', {})).status).toBe(404);
    expect((await upload(globex, 'acme', 'z')).status).toBe(404);
    expect((await onA('/runs', { sessionId: 'q-plan', input: { content: 'later' }, runtime: h.runtime, ...later })).status).toBe(404);
    expect(await scopeState('acme')).toEqual(before);
    // A's quotas are whole (its tokens of the test above aside).
    expect((await acme.post('/sessions/q0/stream-token', {})).status).toBe(201);
    expect((await upload(acme, 'acme', 'x'.repeat(16))).status).toBe(201);
    expect((await acme.submit('q-plan', 'later', later)).status).toBe(202);
    await api.close();
  });
});
