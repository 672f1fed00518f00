import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { SCHEMA_LIMITS } from '../src/lib/engine/schema/schema-limits.ts';
import { runEvents } from './helpers/engine.ts';
import { sleep, useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { scrape, total } from './helpers/prom-text.ts';
import { EXPONENTIAL_ANYOF, nestedArrays, nestedSchema } from './helpers/hostile-schemas.ts';

/**
 * Issue 29's findings on waits, against a real `baton api` and `baton worker`: resumes whose
 * clients went away are not validated for nobody, a scope's queued schema checks are capped
 * on every route (the keyless one counted against the token's scope), a run's pending waits
 * are bounded and its status events say what changed, a wait schema that refers back to
 * itself or is over a limit fails the run at waitFor naming the limit, and the resume token
 * is checked before the body is read.
 */
const WAIT_AGENTS = fileURLToPath(new URL('./fixtures/wait-agents.ts', import.meta.url));
const MANY_WAITS = fileURLToPath(new URL('./fixtures/bounded-wait-agents.ts', import.meta.url));
/** A value EXPONENTIAL_ANYOF takes more than the validation budget to refuse (issue 29 used 23 levels). */
const DEEP = nestedArrays(23);
/**
 * How the API's schema checks ended, from its /metrics. Abandoned checks must end `gone`
 * (dropped from the queue, or stopped with their thread), never run out their budget for
 * nobody: before, each ran its whole 2 s budget first, and 24 of them held the next resume 52 s.
 */
async function checks(url: string): Promise<{ gone: number; budget: number; passed: number }> {
  const { samples } = await scrape(`${url}/metrics`);
  const n = (outcome: string) => total(samples, 'baton_schema_checks_total', { outcome });
  return { gone: n('gone'), budget: n('budget'), passed: n('passed') };
}

let h: Harness;
let api: Child;
let capped: Child;
let acme: ScopeClient;
let globex: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  api = await h.spawn('api');
  // A second API whose scopes may queue two checks each: the cap is reached with few requests.
  capped = await h.spawn('api', { env: { SCHEMA_CHECKS_PER_SCOPE: '2' } });
  await h.spawn('worker', { agents: [WAIT_AGENTS, MANY_WAITS] });
  acme = await h.client(api.url!, 'acme', 'client');
  globex = await h.client(api.url!, 'globex', 'client');
});

const resumePath = (runId: string, waitKey: string) => `/runs/${runId}/waits/${encodeURIComponent(waitKey)}`;

/** Sends `n` requests and gives up on each after `afterMs` (the client goes away); resolves once all are gone. */
async function abandon(n: number, afterMs: number, send: (signal: AbortSignal) => Promise<Response>): Promise<void> {
  const gone = new AbortController();
  const sent = Array.from({ length: n }, () => send(gone.signal).then((r) => r.text()).catch(() => undefined));
  await sleep(afterMs);
  gone.abort();
  await Promise.all(sent);
}

const postJson = (url: string, body: unknown, headers: Record<string, string>, signal?: AbortSignal) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal });

/** A run of fx-ask waiting on wait:answer:1 with `schema`. */
async function asking(c: ScopeClient, sessionId: string, schema: unknown) {
  const sub = await c.submit(sessionId, 'ask', { agent: 'fx-ask', metadata: { schema } });
  expect(sub.status).toBe(202);
  return c.waitStatus(sub.body.id, ['waiting', 'failed']);
}

describe('work leaves with its request', () => {
  let hostile: any;

  it("24 abandoned resumes against an exponential wait schema do not hold up the same scope's next resume", async () => {
    hostile = await asking(acme, 'hostile', EXPONENTIAL_ANYOF);
    const trivial = await asking(acme, 'trivial', { type: 'number' });
    expect([hostile.status, trivial.status]).toEqual(['waiting', 'waiting']);
    const before = await checks(api.url!);
    await abandon(24, 1_000, (signal) => postJson(`${api.url}/v1/scopes/acme${resumePath(hostile.id, 'wait:answer:1')}`, { value: DEEP }, acme.headers, signal));
    const res = await postJson(`${api.url}/v1/scopes/acme${resumePath(trivial.id, 'wait:answer:1')}`, { value: 7 }, acme.headers, AbortSignal.timeout(30_000));
    expect(res.status).toBe(200);
    // Every abandoned resume's check left with its client; none ran out its budget.
    const after = await checks(api.url!);
    expect(after.gone - before.gone).toBe(24);
    expect(after.budget - before.budget).toBe(0);
    expect(after.passed - before.passed).toBe(1);
    expect((await acme.waitStatus(trivial.id, ['succeeded', 'failed'])).result.answer).toMatch(/^asking; got 7/);
    // Nothing of the abandoned resumes was delivered: the hostile wait still pends.
    expect((await acme.get(`/runs/${hostile.id}`)).body).toMatchObject({ status: 'waiting', waits: [{ key: 'wait:answer:1' }] });
  }, 60_000);

  it("8 abandoned keyless resumes do not hold up another scope's outputSchema submit", async () => {
    const token = (await acme.get(`/runs/${hostile.id}`)).body.waits[0].token;
    const before = await checks(api.url!);
    await abandon(8, 1_000, (signal) => postJson(`${api.url}/v1/waits/${encodeURIComponent(token)}`, { value: DEEP }, {}, signal));
    // A schema the thread has not seen: it must be compiled.
    const sub = await globex.submit('schema', '{}', { agent: 'fx-ask', outputSchema: { type: 'object', description: `fresh ${Date.now()}` } });
    expect(sub.status).toBe(202);
    // Round robin may run globex's check before acme's abandoned ones have all left: wait for them.
    await waitFor(async () => (await checks(api.url!)).gone - before.gone >= 8);
    const after = await checks(api.url!);
    expect(after.gone - before.gone).toBe(8);
    expect(after.budget - before.budget).toBe(0);
    expect(after.passed - before.passed).toBeGreaterThanOrEqual(1);
  }, 60_000);

  it("a scope's waiting checks are capped on every route that validates its schemas, the keyless one against the token's scope: 429 SCHEMA_CHECKS_BUSY with Retry-After", async () => {
    const run = (await acme.get(`/runs/${hostile.id}`)).body;
    const token = run.waits[0].token;
    // The schema thread of that API is up first, so the first check runs at once and two wait.
    const warm = await postJson(`${capped.url}/v1/scopes/globex/runs`, {
      sessionId: 'warm', input: { content: 'x' }, agent: 'fx-ask', runtime: h.runtime, outputSchema: { type: 'object' },
    }, globex.headers);
    expect(warm.status).toBe(202);
    const gone = new AbortController();
    const keyed = `${capped.url}/v1/scopes/acme${resumePath(run.id, 'wait:answer:1')}`;
    // One check runs, two wait: the scope's cap on this API.
    const held = Array.from({ length: 3 }, () => postJson(keyed, { value: DEEP }, acme.headers, gone.signal).catch(() => undefined));
    await sleep(1_000);
    try {
      const refusals = [
        await postJson(keyed, { value: DEEP }, acme.headers, AbortSignal.timeout(1_500)),
        await postJson(`${capped.url}/v1/waits/${encodeURIComponent(token)}`, { value: DEEP }, {}, AbortSignal.timeout(1_500)),
        await postJson(`${capped.url}/v1/scopes/acme/runs`, {
          sessionId: 'capped', input: { content: 'x' }, agent: 'fx-ask', runtime: h.runtime, outputSchema: { type: 'object', description: `new ${Date.now()}` },
        }, acme.headers, AbortSignal.timeout(1_500)),
      ];
      for (const res of refusals) {
        const body = await res.json();
        expect([res.status, body.error.code, res.headers.get('retry-after')]).toEqual([429, 'SCHEMA_CHECKS_BUSY', '2']);
        expect(body.error.details[0].message).toMatch(/2 schema checks of this scope are already waiting/);
      }
      // Another scope is not refused for acme's queue.
      const other = await postJson(`${capped.url}/v1/scopes/globex/runs`, {
        sessionId: 'capped', input: { content: 'x' }, agent: 'fx-ask', runtime: h.runtime, outputSchema: { type: 'object', description: `other ${Date.now()}` },
      }, globex.headers, AbortSignal.timeout(10_000));
      expect(other.status).toBe(202);
    } finally {
      gone.abort();
      await Promise.all(held);
    }
  }, 60_000);
});

describe('bounded waits', () => {
  it('a run may have MAX_WAITS_PER_RUN (100) waits pending; the waitFor that passes it fails the run with TOO_MANY_WAITS, naming the limit', async () => {
    const sub = await acme.submit('many-101', 'x', { agent: 'fx-many', metadata: { count: 101 } });
    const run = await acme.waitStatus(sub.body.id, ['waiting', 'failed', 'succeeded']);
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['failed', 1, 'TOO_MANY_WAITS']);
    expect(run.lastError.message).toBe('wait:item:101 is one wait too many: a run may have at most 100 waits pending at once (MAX_WAITS_PER_RUN)');
    expect(run.waits).toBeUndefined();
  });

  it('status events carry what changed: 100 waits of 1 KB resumed 20 times write each wait into the stream once', async () => {
    const sub = await acme.submit('many-100', 'x', { agent: 'fx-many', metadata: { count: 100, promptBytes: 1_000 } });
    const run = await acme.waitStatus(sub.body.id, ['waiting', 'failed']);
    expect([run.status, run.waits.length]).toEqual(['waiting', 100]);
    for (let i = 1; i <= 20; i++) {
      expect((await acme.post(resumePath(run.id, `wait:item:${i}`), { value: i })).status).toBe(200);
      await waitFor(async () => {
        const r = (await acme.get(`/runs/${run.id}`)).body;
        return r.status === 'waiting' && r.waits.length === 100 - i;
      }, 20_000, `the run to wait on ${100 - i} waits`);
    }
    const waiting = (await runEvents(h, 'acme', run.id)).filter((e) => e.type === 'status' && e.data.status === 'waiting');
    expect(waiting.map((e) => [e.data.waits.length, e.data.pending])).toEqual([
      [100, 100], ...Array.from({ length: 20 }, (_, i) => [0, 99 - i]),
    ]);
    const bytes = (await h.redis.xrange(h.keys.scope('acme').events(run.id), '-', '+'))
      .reduce((n, [, fields]) => n + fields.reduce((m, f) => m + Buffer.byteLength(f), 0), 0);
    console.log(`event stream of 100 waits resumed 20 times: ${bytes} bytes`);
    // The first park's 100 waits (~110 KB) and small events after it; repeating the pending
    // waits at every park wrote about 2 MB here (16.1 MB for 2,000 waits resumed 100 times).
    expect(bytes).toBeLessThan(150_000);
    // The inspector and the client read the run's waits, which still lists every pending one.
    const now = (await acme.get(`/runs/${run.id}`)).body;
    const keys = now.waits.map((w: any) => w.key).sort((a: string, b: string) => Number(a.split(':')[2]) - Number(b.split(':')[2]));
    expect(keys).toEqual(Array.from({ length: 80 }, (_, i) => `wait:item:${i + 21}`));
    expect(now.waits[0]).toMatchObject({ kind: 'input', prompt: 'p'.repeat(1_000), token: expect.stringMatching(/^bwt_acme\./) });
  }, 120_000);
});

describe('wait schemas are held to the limits of an outputSchema at waitFor', () => {
  it('{"$ref":"#"} fails the run at waitFor with WAIT_SCHEMA_INVALID naming selfReference, instead of a wait no value can resume', async () => {
    const run = await asking(acme, 'self-ref', { $ref: '#' });
    expect([run.status, run.lastError?.code]).toEqual(['failed', 'WAIT_SCHEMA_INVALID']);
    expect(run.lastError.message).toBe('the schema of wait:answer:1 is not a usable JSON Schema: a reference leads back to the schema it is in ' +
      'without descending into the value, so validating would never end (selfReference) (at $ref)');
    expect(run.waits).toBeUndefined();
  });

  it('a wait schema over a limit names the limit and the wait, not outputSchema', async () => {
    const run = await asking(acme, 'too-deep', nestedSchema(SCHEMA_LIMITS.maxDepth + 1));
    expect([run.status, run.lastError?.code]).toEqual(['failed', 'WAIT_SCHEMA_INVALID']);
    expect(run.lastError.message).toMatch(/^the schema of wait:answer:1 is not a usable JSON Schema: the schema is nested deeper than 64 levels \(maxDepth\) \(at not\.not/);
    expect(run.lastError.message).not.toContain('outputSchema');
  });
});

describe('POST /v1/waits/{token}', () => {
  it('checks the token before the body: a made-up token is the same 404 with a malformed or oversized body; a real one parses it', async () => {
    const madeUp = `/v1/waits/bwt_acme.${'x'.repeat(43)}`;
    const expected = { status: 404, body: { error: { code: 'NOT_FOUND', message: 'Not found.', details: [] } } };
    const good = await call(api.url!, 'POST', madeUp, { value: 1 });
    expect({ status: good.status, body: good.body }).toEqual(expected);
    const malformed = await call(api.url!, 'POST', madeUp, '{"value": nope', { 'content-type': 'application/json' });
    expect({ status: malformed.status, body: malformed.body }).toEqual(expected);
    const oversized = await call(api.url!, 'POST', madeUp, JSON.stringify({ value: 'x'.repeat(2 * 1024 * 1024) }));
    expect({ status: oversized.status, body: oversized.body }).toEqual(expected);
    // A token that opens a wait: its body is read and parsed, and refused for what it is.
    const run = await asking(acme, 'token-first', { type: 'number' });
    const real = await call(api.url!, 'POST', `/v1/waits/${encodeURIComponent(run.waits[0].token)}`, '{"value": nope', { 'content-type': 'application/json' });
    expect([real.status, real.body.error.code]).toEqual([400, 'INVALID_JSON']);
  });

  it('keeps working after the key that submitted the run is revoked: it is a capability for its wait, not a key', async () => {
    const keys = new ApiKeyStore(h.redis, h.keys);
    const { key, id } = await keys.create('acme', 'client');
    const headers = { authorization: `Bearer ${key}` };
    const sub = await call(api.url!, 'POST', '/v1/scopes/acme/runs', {
      sessionId: 'revoked', input: { content: 'v1' }, agent: 'fx-ship', runtime: h.runtime,
    }, headers);
    expect(sub.status).toBe(202);
    const run = await acme.waitStatus(sub.body.id, ['waiting']);
    expect(await keys.revoke(id)).toBe(true);
    expect((await call(api.url!, 'GET', `/v1/scopes/acme/runs/${run.id}`, undefined, headers)).status).toBe(401);
    const res = await call(api.url!, 'POST', `/v1/waits/${encodeURIComponent(run.waits[0].token)}`, { value: { approved: true } });
    expect([res.status, res.body]).toEqual([200, { runId: run.id, waitKey: 'wait:ship:1', resumed: true }]);
    expect((await acme.waitStatus(run.id, ['succeeded', 'failed'])).result.answer).toBe('shipped v1');
  });
});
