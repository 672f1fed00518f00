import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { beforeAll, describe, expect, it } from 'vitest';
import { startApi } from '../src/api/server.ts';
import { createBatonRouter } from '../src/server.ts';
import { createLogger } from '../src/lib/logger.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { startWorker } from '../src/worker/worker.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { call, readSse } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * API keys never reach the logs: an API and a worker log at `trace` into a buffer (and a real
 * `baton api` child to its stdout) while keys are used every way a client uses them, right
 * and wrong; no captured line may contain a key.
 */
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

const secret = () => `bk_${randomBytes(32).toString('base64url')}`;

/**
 * Uses `key` (valid) and `wrong` (never issued) on the API at `url`, the ways clients do, and
 * stream tokens the ways pages do (in the URL); returns the tokens, which must not be logged either.
 */
async function exercise(url: string, key: string, wrong: string, otherScopeKey: string): Promise<string[]> {
  const auth = { authorization: `Bearer ${key}` };
  const base = '/v1/scopes/acme';
  const sub = await call(url, 'POST', `${base}/runs`, { sessionId: 's1', input: { content: 'hello logs' }, runtime: h.runtime }, auth);
  expect(sub.status).toBe(202);
  const sse = await readSse(`${url}${base}/runs/${sub.body.id}/events`, { headers: auth });
  expect(sse.ended).toBe(true);
  expect((await call(url, 'GET', `${base}/runs/${sub.body.id}`, undefined, auth)).status).toBe(200);
  expect((await call(url, 'GET', `${base}/runtimes/${h.runtime}/stats`, undefined, auth)).status).toBe(200);
  // Wrong in every way: an unknown key, another scope's key, a key in the query and in the body,
  // a body that is not JSON and quotes the key, a key with the wrong scheme.
  expect((await call(url, 'GET', `${base}/runs`, undefined, { authorization: `Bearer ${wrong}` })).status).toBe(401);
  expect((await call(url, 'GET', `${base}/runs`, undefined, { authorization: `Bearer ${otherScopeKey}` })).status).toBe(404);
  expect((await call(url, 'GET', `${base}/runs?key=${key}`, undefined, auth)).status).toBe(400);
  expect((await call(url, 'POST', `${base}/runs`, { sessionId: 's2', input: { content: 'x' }, apiKey: key }, auth)).status).toBe(400);
  expect((await call(url, 'POST', `${base}/runs`, `{"key": "${key}"`, auth)).status).toBe(400);
  expect((await call(url, 'GET', `${base}/runs`, undefined, { authorization: `Basic ${key}` })).status).toBe(401);
  // Stream tokens travel in URLs: right, on the wrong run, never issued, and as a key.
  const token = (await call(url, 'POST', `${base}/runs/${sub.body.id}/stream-token`, {}, auth)).body.token as string;
  const forged = `bst_${randomBytes(32).toString('base64url')}`;
  expect((await readSse(`${url}${base}/runs/${sub.body.id}/events?access_token=${token}`)).ended).toBe(true);
  expect((await call(url, 'GET', `${base}/runs/rnosuchrun0000000/events?access_token=${token}`)).status).toBe(401);
  expect((await call(url, 'GET', `${base}/runs/${sub.body.id}/events?access_token=${forged}`)).status).toBe(401);
  expect((await call(url, 'POST', `${base}/runs/${sub.body.id}/cancel?access_token=${token}`, {})).status).toBe(401);
  expect((await call(url, 'GET', `${base}/runs`, undefined, { authorization: `Bearer ${token}` })).status).toBe(401);
  return [token, forged];
}

function expectNoKey(logs: string, keys: string[]): void {
  for (const k of keys) {
    expect(logs.includes(k), 'a key appears in the logs').toBe(false);
    // Not even most of one (a log that cuts the header short still leaks the key's entropy).
    expect(logs.includes(k.slice(3, 27)), `part of a key appears in the logs: ${logs.split('\n').find((l) => l.includes(k.slice(3, 27)))}`).toBe(false);
  }
}

describe('keys in logs', () => {
  it('never appear in what the API and the worker log, whatever the request', async () => {
    const lines: string[] = [];
    const log = createLogger('trace', { write: (s: string) => void lines.push(s) });
    const boot = secret();
    const config = h.configWith({ LOG_LEVEL: 'trace', BATON_BOOTSTRAP_KEYS: `acme:admin:${boot}` });
    const worker = await startWorker({ config, redisUrl: h.redisUrl, log, agents: new Map(builtinAgents(config).map((a) => [a.name, a])) });
    track(worker, () => worker.close());
    const api = await startApi({ config, redisUrl: h.redisUrl, log });
    track(api, () => api.close());
    const issued = await h.key('acme', 'admin');
    const globex = await h.key('globex', 'client');
    const wrong = secret();
    const tokens = [...(await exercise(api.url, issued, wrong, globex)), ...(await exercise(api.url, boot, wrong, globex))];
    await api.close();
    await worker.close();
    const logs = lines.join('');
    console.log(`${lines.length} log lines captured at trace level`);
    expect(logs).toContain('"msg":"request"');
    expect(logs).toContain('run started');
    expectNoKey(logs, [issued, boot, wrong, globex, ...tokens]);
  });

  it('never appear in the output of a real `baton api` process', async () => {
    const boot = secret();
    const api = await h.spawn('api', { env: { LOG_LEVEL: 'trace', BATON_BOOTSTRAP_KEYS: `acme:admin:${boot}` } });
    await h.startWorker();
    const wrong = secret();
    const tokens = await exercise(api.url!, boot, wrong, await h.key('globex', 'client'));
    await api.kill('SIGTERM');
    const out = api.output();
    expect(out).toContain('"msg":"request"');
    expectNoKey(out, [boot, wrong, ...tokens]);
  });
});

/**
 * The top-level keys a JSON log line names more than once (pino writes a child logger's
 * bindings after its parent's, duplicates included; JSON.parse keeps only the last).
 */
function repeatedKeys(line: string): string[] {
  const once = JSON.stringify(JSON.parse(line));
  const count = (text: string, key: string) => text.split(`${JSON.stringify(key)}:`).length - 1;
  return Object.keys(JSON.parse(line)).filter((k) => count(line, k) > count(once, k));
}

describe('log lines', () => {
  it('name each key once: an API and a worker, and a router with a worker on its resources', async () => {
    const lines: string[] = [];
    const log = createLogger('trace', { write: (s: string) => void lines.push(s) });
    const config = h.configWith({ LOG_LEVEL: 'trace' });
    const agents = () => new Map(builtinAgents(config).map((a) => [a.name, a]));
    const worker = await startWorker({ config, redisUrl: h.redisUrl, log, agents: agents() });
    track(worker, () => worker.close());
    const api = await startApi({ config, redisUrl: h.redisUrl, log });
    track(api, () => api.close());

    const baton = await createBatonRouter({ config, redisUrl: h.redisUrl, log });
    track(baton, () => baton.close());
    const embedded = await startWorker({ resources: baton.resources, agents: agents() });
    track(embedded, () => embedded.close());
    const app = express();
    app.use('/agents', baton.router);
    const server = createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    track(server, () => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
    const routerUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/agents`;

    const auth = { authorization: `Bearer ${await h.key('acme', 'client')}` };
    for (const url of [api.url, routerUrl]) {
      const sub = await call(url, 'POST', '/v1/scopes/acme/runs', { sessionId: 'once', input: { content: 'hello logs' }, runtime: h.runtime }, auth);
      expect(sub.status).toBe(202);
      expect((await readSse(`${url}/v1/scopes/acme/runs/${sub.body.id}/events`, { headers: auth })).ended).toBe(true);
    }
    await Promise.all([api.close(), worker.close(), embedded.close()]);
    await baton.close();

    const parsed = lines.join('').split('\n').filter(Boolean);
    expect(parsed.some((l) => l.includes('"msg":"run started"') && l.includes('"runtime"'))).toBe(true);
    expect(parsed.some((l) => l.includes('"msg":"request"') && l.includes('"component":"api"'))).toBe(true);
    const repeated = parsed.flatMap((l) => repeatedKeys(l).map((k) => `${k} in ${l}`));
    expect(repeated).toEqual([]);
  });
});
