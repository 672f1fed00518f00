import { beforeAll, expect, it } from 'vitest';
import { startApi } from '../src/api/server.ts';
import { createLogger } from '../src/lib/logger.ts';
import type { Agent } from '../src/lib/sdk/agent.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { startWorker } from '../src/worker/worker.ts';
import { closeWaitFixtureRedis, shipAgent } from './fixtures/wait-agents.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * Resume tokens are credentials that travel in a URL path: the API and the worker log at
 * `trace` into a buffer while tokens are used right and wrong; no line may hold one (or most
 * of one), and the request lines show the route with the token left out.
 */
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
  process.env.REDIS_URL = h.redisUrl;
  process.env.BATON_KEY_PREFIX = h.prefix;
  track(null, closeWaitFixtureRedis);
});

it('resume tokens never reach the logs of the API or the worker', async () => {
  const lines: string[] = [];
  const log = createLogger('trace', { write: (s: string) => void lines.push(s) });
  const config = h.configWith({ LOG_LEVEL: 'trace' });
  const agents = new Map<string, Agent>([...builtinAgents(config), shipAgent].map((a) => [a.name, a]));
  const worker = await startWorker({ config, redisUrl: h.redisUrl, log, agents });
  track(worker, () => worker.close());
  const api = await startApi({ config, redisUrl: h.redisUrl, log });
  track(api, () => api.close());
  const acme = await h.client(api.url, 'acme', 'client');

  const tokens: string[] = [];
  for (const session of ['t1', 't2']) {
    const run = (await acme.submit(session, 'v', { agent: 'fx-ship' })).body;
    tokens.push((await acme.waitStatus(run.id, ['waiting'])).waits[0].token);
  }
  const post = (path: string, value: unknown) => call(api.url, 'POST', path, { value });
  expect((await post(`/v1/waits/${tokens[0]}`, { approved: 'not a boolean' })).status).toBe(400);
  expect((await post(`/v1/waits/${tokens[0]}`, { approved: false, reason: 'no' })).status).toBe(200);
  expect((await post(`/v1/waits/${tokens[0]}`, { approved: true })).status).toBe(409);
  expect((await post(`/V1/WAITS/${tokens[1]}`, { approved: true })).status).toBe(200);
  expect((await post(`/v1/waits/${tokens[1].slice(0, -4)}AAAA`, { approved: true })).status).toBe(404);
  expect((await post(`/v1/waits/${tokens[1].slice(0, 20)}`, { approved: true })).status).toBe(400);
  expect((await call(api.url, 'POST', `/v1/waits/${tokens[1]}`, '{"value": ', {})).status).toBe(400);
  for (const run of (await acme.get('/runs')).body.runs) expect((await acme.waitStatus(run.id, ['succeeded', 'failed'])).status).toBe('succeeded');

  const text = lines.join('');
  for (const t of tokens) {
    expect(text.includes(t), 'a token appears in the logs').toBe(false);
    const secretPart = t.slice(t.indexOf('.') + 1);
    expect(text.includes(secretPart.slice(0, 20)), 'part of a token appears in the logs').toBe(false);
  }
  const requests = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request' && /waits/i.test(l.path));
  expect(requests.length).toBeGreaterThanOrEqual(7);
  expect(new Set(requests.map((l) => l.path))).toEqual(new Set(['/v1/waits/…']));
});
