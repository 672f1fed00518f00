import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { runClientCommand } from '../src/cli/client-commands.ts';
import { BatonApiError, BatonClient } from '../src/client.ts';
import { LIMIT_FIELDS } from '../src/lib/contract/admin.ts';
import { LIMITS_CACHE_MS } from '../src/lib/tenancy/limits.ts';
import { BIN, sleep, useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * A scope's limits (GET/PUT /v1/scopes/{scope}/limits) and the operator keys that set them:
 * only an operator key sets a scope's limits (a scope's admin gets 403, so a tenant can never
 * raise its own), the scope's admin may read them (its client key gets 403), an operator key
 * reads no scope's runs, a body out of range is a 400 that changes nothing, and a change
 * applies without a restart, in every API process.
 */
let h: Harness;
let url: string;
let operator: string;

beforeAll(async () => {
  // No fair-share pass: a test sets the level itself.
  h = await useHarness({ SUBMIT_RATE_PER_SEC: '0.2', SUBMIT_BURST: '100', FAIR_SHARE_INTERVAL_MS: '0' });
  url = (await h.startApi()).url;
  operator = await h.operatorKey();
});

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const limitsOf = (scope: string, key: string) => call(url, 'GET', `/v1/scopes/${scope}/limits`, undefined, bearer(key));
const putLimits = (scope: string, key: string, body: unknown, base = url) => call(base, 'PUT', `/v1/scopes/${scope}/limits`, body, bearer(key));

/** The scope's limits hash, field by field, as Redis holds it. */
const stored = (scope: string) => h.redis.hgetall(h.keys.scope(scope).limits);

/** A digest of every key of the scope: what "changes nothing" compares. */
async function scopeState(scope: string): Promise<string> {
  const keys = (await h.allKeys()).filter((k) => k.startsWith(`${h.prefix}:{${scope}}:`)).sort();
  const hash = createHash('sha1');
  for (const k of keys) hash.update(k).update((await h.redis.dumpBuffer(k)) ?? 'gone');
  return `${keys.length} keys ${hash.digest('hex')}`;
}

describe('an operator key', () => {
  it('is bound to no scope: whoami says so, and it sets a scope’s limits, stored as the documented hash', async () => {
    const who = await call(url, 'GET', '/v1/whoami', undefined, bearer(operator));
    expect(who).toMatchObject({ status: 200, body: { scope: null, role: 'operator', keyId: expect.stringMatching(/^k/) } });

    const res = await putLimits('acme', operator, { maxActive: 2, maxActivePerKey: null, weight: 3, submitRatePerSec: 0.5, tokensPerDay: 1000 });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const c = h.config;
    const defaults = {
      maxActive: c.MAX_ACTIVE_PER_SCOPE, maxActivePerKey: c.MAX_ACTIVE_PER_KEY || null, submitRatePerSec: c.SUBMIT_RATE_PER_SEC,
      submitBurst: c.SUBMIT_BURST, weight: c.SCOPE_WEIGHT, maxStreams: c.SSE_MAX_PER_SCOPE, tokensPerDay: c.TOKENS_PER_DAY || null,
      readBytesPerSec: c.READ_BYTES_PER_SEC, readBurstBytes: c.READ_BURST_BYTES,
      maxQueuedRuns: c.MAX_QUEUED_RUNS_PER_SCOPE || null, maxStoredBytes: c.STORAGE_MAX_BYTES_PER_SCOPE || null,
      forksPerMinute: c.FORKS_PER_MINUTE || null, forkBytesPerMinute: c.FORK_BYTES_PER_MINUTE || null, retentionMs: c.RETENTION_MS,
    };
    expect(res.body).toEqual({
      scope: 'acme',
      limits: { ...defaults, maxActive: 2, maxActivePerKey: null, weight: 3, submitRatePerSec: 0.5, tokensPerDay: 1000 },
      set: { maxActive: 2, maxActivePerKey: null, weight: 3, submitRatePerSec: 0.5, tokensPerDay: 1000 },
      defaults,
      inUse: {
        active: 0, parked: 0, share: null, streams: 0, tokensToday: 0, readBytesLeft: c.READ_BURST_BYTES, queuedRuns: 0, storedBytes: 0,
      },
    });
    // Decimal text, one field per limit; "none" is 0, as the configured defaults say it.
    expect(await stored('acme')).toEqual({ maxActive: '2', maxActivePerKey: '0', weight: '3', submitRatePerSec: '0.5', tokensPerDay: '1000' });
    // The scope's admin reads the same.
    const read = await limitsOf('acme', await h.key('acme', 'admin'));
    expect(read.status).toBe(200);
    expect(read.body).toEqual(res.body);
    expect(read.headers.get('cache-control')).toBe('no-store');
  });

  it('replaces the overrides with a PUT: a field left out reverts to its default, {} clears them all', async () => {
    await putLimits('replaced', operator, { maxActive: 5, maxStreams: 9 });
    const res = await putLimits('replaced', operator, { submitBurst: 7 });
    expect(res.status).toBe(200);
    expect(res.body.set).toEqual({ submitBurst: 7 });
    expect(res.body.limits.maxActive).toBe(h.config.MAX_ACTIVE_PER_SCOPE);
    expect(res.body.limits.maxStreams).toBe(h.config.SSE_MAX_PER_SCOPE);
    expect(await stored('replaced')).toEqual({ submitBurst: '7' });
    const cleared = await putLimits('replaced', operator, {});
    expect(cleared.body.set).toEqual({});
    expect(cleared.body.limits).toEqual(cleared.body.defaults);
    expect(await h.redis.exists(h.keys.scope('replaced').limits)).toBe(0);
  });

  it('reads no scope’s runs or data: 403 on every tenant route, and nothing changes', async () => {
    const acme = await h.client(url, 'acme', 'client');
    const run = await acme.submit('s1', 'mine', { runtime: `${h.runtime}-none` });
    expect(run.status).toBe(202);
    const before = await scopeState('acme');
    for (const [method, path, body] of [
      ['GET', '/runs'], ['GET', `/runs/${run.body.id}`], ['GET', `/runs/${run.body.id}/events`], ['GET', `/runs/${run.body.id}/steps`],
      ['GET', '/sessions/s1/messages'], ['GET', '/runtimes'], ['GET', `/runtimes/${h.runtime}/stats`], ['GET', '/usage?from=2024-01-01&to=2024-01-02'],
      ['POST', '/runs', { sessionId: 's2', input: { content: 'an operator submits' }, runtime: h.runtime }],
      ['POST', `/runs/${run.body.id}/cancel`, {}], ['POST', `/runs/${run.body.id}/stream-token`, {}],
      ['POST', `/runtimes/${h.runtime}/drain`, {}],
    ] as const) {
      const res = await call(url, method, `/v1/scopes/acme${path}`, body, bearer(operator));
      expect([res.status, res.body.error?.code], `${method} ${path}`).toEqual([403, 'FORBIDDEN']);
    }
    expect(await scopeState('acme')).toBe(before);
    expect((await acme.get(`/runs/${run.body.id}`)).body.status).toBe('queued');
  });
});

describe('keys of a scope', () => {
  it('its admin’s PUT is 403, its client’s GET is 403, another scope’s key gets the 404 of a missing object; nothing changes', async () => {
    await putLimits('guarded', operator, { maxActive: 3 });
    const before = await scopeState('guarded');
    const admin = await h.key('guarded', 'admin');
    const client = await h.key('guarded', 'client');
    const raise = { maxActive: 100_000, submitBurst: 1_000_000 };
    expect(await putLimits('guarded', admin, raise)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    expect(await putLimits('guarded', client, raise)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    expect(await limitsOf('guarded', client)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    for (const role of ['admin', 'client'] as const) {
      const other = await h.key('elsewhere', role);
      const onIt = await limitsOf('guarded', other);
      expect(onIt).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
      expect(await limitsOf('no-such-scope', other)).toMatchObject({ status: onIt.status, body: onIt.body });
      expect(await putLimits('guarded', other, raise)).toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
    }
    expect(await call(url, 'GET', '/v1/scopes/guarded/limits')).toMatchObject({ status: 401, body: { error: { code: 'UNAUTHENTICATED' } } });
    expect(await scopeState('guarded')).toBe(before);
    expect((await limitsOf('guarded', admin)).body.set).toEqual({ maxActive: 3 });
  });
});

describe('a body out of range', () => {
  it('is 400 VALIDATION_FAILED naming each failing field, and changes nothing', async () => {
    await putLimits('strict', operator, { maxActive: 4, tokensPerDay: 500 });
    const before = await scopeState('strict');
    const bad: [unknown, string[]][] = [
      [{ maxActive: 0 }, ['body.maxActive']],
      [{ maxActive: 100_001 }, ['body.maxActive']],
      [{ maxActive: 1.5 }, ['body.maxActive']],
      [{ maxActive: '3' }, ['body.maxActive']],
      [{ maxActive: null }, ['body.maxActive']],
      [{ weight: 0 }, ['body.weight']],
      [{ weight: 1001 }, ['body.weight']],
      [{ maxActivePerKey: 0 }, ['body.maxActivePerKey']],
      [{ submitRatePerSec: 0 }, ['body.submitRatePerSec']],
      [{ submitRatePerSec: -1 }, ['body.submitRatePerSec']],
      [{ submitBurst: 0.5 }, ['body.submitBurst']],
      [{ maxStreams: 1_000_001 }, ['body.maxStreams']],
      [{ tokensPerDay: -5 }, ['body.tokensPerDay']],
      [{ maxActive: 0, weight: 5000 }, ['body.maxActive', 'body.weight']],
      [{ maxActive: 2, priority: 9 }, ['body']],
      [[], ['body']],
    ];
    for (const [body, paths] of bad) {
      const res = await putLimits('strict', operator, body);
      const what = `${JSON.stringify(body)} -> ${res.status} ${JSON.stringify(res.body)}`;
      expect([res.status, res.body.error.code], what).toEqual([400, 'VALIDATION_FAILED']);
      for (const path of paths) expect(res.body.error.details.map((d: { path: string }) => d.path), what).toContain(path);
    }
    const notJson = await call(url, 'PUT', '/v1/scopes/strict/limits', '{"maxActive":', { ...bearer(operator), 'content-type': 'application/json' });
    expect(notJson.status).toBe(400);
    expect(await scopeState('strict')).toBe(before);
    expect(await stored('strict')).toEqual({ maxActive: '4', tokensPerDay: '500' });
  });

  it('stored by hand (not through the API) is an error naming it, never read as its default', async () => {
    await h.redis.hset(h.keys.scope('handmade').limits, 'maxStreams', 'lots');
    const res = await limitsOf('handmade', operator);
    expect(res.status).toBe(500);
    // A PUT replaces it.
    expect((await putLimits('handmade', operator, { maxStreams: 3 })).body.limits.maxStreams).toBe(3);
  });
});

describe('what is in use', () => {
  it('shows the scope’s active runs, the parked count the scheduler keeps, its fair share while scopes contend, and this process’s open streams', async () => {
    const c = await h.client(url, 'busy', 'client');
    const runs = [];
    // No worker serves this runtime: each run keeps its slot, dispatched.
    for (let i = 0; i < 3; i++) runs.push((await c.submit(`b${i}`, 'wait', { runtime: `${h.runtime}-none` })).body.id);
    const ctrl = new AbortController();
    const stream = await fetch(`${url}/v1/scopes/busy/runs/${runs[0]}/events`, { headers: c.headers, signal: ctrl.signal });
    expect(stream.status).toBe(200);
    try {
      let view = (await limitsOf('busy', operator)).body;
      // Dispatched and not started: queued to the API, and what maxQueuedRuns counts; their records' bytes stored.
      const storage = { queuedRuns: 3, storedBytes: expect.any(Number) };
      expect(view.inUse).toEqual({
        active: 3, parked: 0, share: null, streams: 1, tokensToday: 0, readBytesLeft: h.config.READ_BURST_BYTES, ...storage,
      });
      expect(view.inUse.storedBytes).toBeGreaterThan(0);
      // The scheduler's count of parked runs, and a fair-share level as the pass that works it
      // out keeps it (src/lib/engine/flow/fair-share.ts): 2.5 slots per unit of weight, weight 1.
      await h.redis.hset(h.keys.scope('busy').meta, { parked: '4' });
      await h.redis.set(h.keys.fairShare, JSON.stringify({ level: 2.5, capacity: 16 }), 'PX', 60_000);
      view = (await limitsOf('busy', operator)).body;
      expect(view.inUse).toEqual({
        active: 3, parked: 4, share: 3, streams: 1, tokensToday: 0, readBytesLeft: h.config.READ_BURST_BYTES, ...storage,
      });
      await h.redis.del(h.keys.fairShare);
    } finally {
      ctrl.abort();
    }
    await waitFor(async () => (await limitsOf('busy', operator)).body.inUse.streams === 0, 10_000, 'the stream to close');
  });
});

describe('a change', () => {
  it('of maxStreams applies in another API process within LIMITS_CACHE_MS, without a restart; beyond it a stream is 429 TOO_MANY_STREAMS', async () => {
    const other = await h.startApi();
    const c = await h.client(other.url, 'streamy', 'client');
    const run = (await c.submit('s', 'wait', { runtime: `${h.runtime}-none` })).body.id;
    const open = async () => {
      const ctrl = new AbortController();
      const res = await fetch(`${other.url}/v1/scopes/streamy/runs/${run}/events`, { headers: c.headers, signal: ctrl.signal });
      const body = res.status === 200 ? undefined : await res.json() as any;
      if (res.status !== 200) ctrl.abort();
      return { status: res.status, body, retryAfter: res.headers.get('retry-after'), close: () => ctrl.abort() };
    };
    // The other process reads (and caches) the default first.
    const first = await open();
    expect(first.status).toBe(200);
    expect((await putLimits('streamy', operator, { maxStreams: 2 })).status).toBe(200);
    await sleep(LIMITS_CACHE_MS + 200);
    const second = await open();
    expect(second.status).toBe(200);
    const third = await open();
    expect([third.status, third.body.error.code, third.retryAfter]).toEqual([429, 'TOO_MANY_STREAMS', String(Math.ceil(h.config.SSE_STALL_MS / 1000))]);
    expect(third.body.error.message).toContain('maxStreams');
    // Raised again: the third fits once the cache has expired.
    await putLimits('streamy', operator, { maxStreams: 3 });
    const again = await waitFor(async () => {
      const s = await open();
      return s.status === 200 ? s : undefined;
    }, LIMITS_CACHE_MS + 5_000, 'the raised cap to apply');
    for (const s of [first, second, again]) s.close();
  });

  it('raising maxActive gives the freed slots to parked runs at once: the PUT’s answer shows them active', async () => {
    await putLimits('raised', operator, { maxActive: 1 });
    const c = await h.client(url, 'raised', 'client');
    // No worker serves this runtime: a run that got a slot keeps it, dispatched.
    for (let i = 0; i < 3; i++) expect((await c.submit(`r${i}`, 'wait', { runtime: `${h.runtime}-none` })).status).toBe(202);
    expect((await limitsOf('raised', operator)).body.inUse).toMatchObject({ active: 1, parked: 2 });
    const raised = await putLimits('raised', operator, { maxActive: 3 });
    expect(raised.body.inUse).toMatchObject({ active: 3, parked: 0 });
    const runs = (await c.get('/runs')).body.runs as { status: string }[];
    expect(runs.map((r) => r.status)).toEqual(['queued', 'queued', 'queued']);
  });

  it('of submitBurst is seen by the next submit, without a restart', async () => {
    // SUBMIT_BURST is 100 here, and SUBMIT_RATE_PER_SEC 0.2 refills one token in 5 s.
    const c = await h.client(url, 'bursty', 'client');
    expect((await c.submit('s0', 'x', { runtime: `${h.runtime}-none` })).status).toBe(202);
    expect((await putLimits('bursty', operator, { submitBurst: 2 })).status).toBe(200);
    const statuses = [];
    for (let i = 1; i < 4; i++) statuses.push((await c.submit(`s${i}`, 'x', { runtime: `${h.runtime}-none` })).status);
    // 99 tokens were left of the 100; from the PUT on the bucket holds at most 2: two submits, then 429.
    expect(statuses).toEqual([202, 202, 429]);
  });
});

describe('baton limits', () => {
  /** The command in this process, its console output captured. */
  async function limitsCommand(args: string[], key = operator): Promise<{ code: number; stdout: string }> {
    let stdout = '';
    const log = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => { stdout += `${a.join(' ')}\n`; });
    try {
      return { code: await runClientCommand('limits', [...args, '--url', url, '--key', key]), stdout };
    } finally {
      log.mockRestore();
    }
  }

  it('set changes only the limits it names, `default` drops one, `none` is null; get prints them all', async () => {
    await putLimits('cli', operator, { maxActive: 6, weight: 2 });
    const set = await limitsCommand(['set', '--scope', 'cli', '--maxActive', '4', '--maxActivePerKey', 'none', '--weight', 'default', '--json']);
    expect(set.code).toBe(0);
    expect(JSON.parse(set.stdout).set).toEqual({ maxActive: 4, maxActivePerKey: null });
    expect(await stored('cli')).toEqual({ maxActive: '4', maxActivePerKey: '0' });
    const reset = await limitsCommand(['set', '--scope', 'cli', '--reset', '--maxStreams', '10', '--json']);
    expect(JSON.parse(reset.stdout).set).toEqual({ maxStreams: 10 });
    const got = await limitsCommand(['get', '--scope', 'cli']);
    for (const f of LIMIT_FIELDS) expect(got.stdout).toContain(f);
    expect(got.stdout).toMatch(/maxStreams\s+10\s+10\s+/);
    // The API's refusals come back as BatonApiError (the command line prints them, exit 1).
    await expect(limitsCommand(['set', '--scope', 'cli', '--weight', '5000'])).rejects.toMatchObject({ status: 400, code: 'VALIDATION_FAILED' });
    await expect(limitsCommand(['set', '--scope', 'cli', '--weight', '2'], await h.key('cli', 'admin'))).rejects.toBeInstanceOf(BatonApiError);
  });

  it('runs as `baton limits` with an operator key from the environment', async () => {
    const child = spawn(process.execPath, [BIN, 'limits', 'set', '--scope', 'cli-spawned', '--maxActive', '3', '--json'], {
      env: { PATH: process.env.PATH ?? '', BATON_URL: url, BATON_API_KEY: operator }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    track(child, async () => { if (child.exitCode === null) child.kill('SIGKILL'); });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b) => { stdout += b; });
    child.stderr.on('data', (b) => { stderr += b; });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code, stderr).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({ scope: 'cli-spawned', set: { maxActive: 3 } });
    // The typed client does the same.
    const client = new BatonClient({ url, apiKey: operator, scope: 'cli-spawned' });
    expect((await client.limits()).limits.maxActive).toBe(3);
  }, 60_000);
});
