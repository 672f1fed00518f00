import { beforeAll, expect, it } from 'vitest';
import { useHarness, type Harness } from './helpers/harness.ts';
import { call, readSse, tokenText } from './helpers/http.ts';

let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

it('a `baton worker` process completes a run submitted to a separate `baton api` process', async () => {
  const key = 'bk_processes-test-key-0123456789';
  const env = { BATON_BOOTSTRAP_KEYS: `acme:client:${key}` };
  const api = await h.spawn('api', { env });
  const worker = await h.spawn('worker', { env });
  const auth = { authorization: `Bearer ${key}` };
  // A standalone worker serves its own /metrics (on METRICS_PORT; `baton start`'s worker does not).
  const metricsUrl = /\(metrics (http:\/\/\S+\/metrics)\)/.exec(worker.output())?.[1];
  expect(metricsUrl, worker.output()).toBeDefined();
  // The body is read: an unread one keeps fetch's connection busy until the pool gives up on it.
  const metrics = await fetch(metricsUrl!);
  expect(metrics.status).toBe(200);
  expect(await metrics.text()).toContain('baton_');

  const content = 'two processes, one redis';
  const sub = await call(api.url!, 'POST', '/v1/scopes/acme/runs', { sessionId: 'p1', input: { content }, runtime: h.runtime }, auth);
  expect(sub.status).toBe(202);
  const sse = await readSse(`${api.url}${sub.body.links.events}`, { headers: auth });
  expect(tokenText(sse.events)).toBe(content);
  const run = await call(api.url!, 'GET', `/v1/scopes/acme/runs/${sub.body.id}`, undefined, auth);
  expect(run.body).toMatchObject({ status: 'succeeded', result: { answer: content } });

  // SIGTERM: both exit cleanly through the shutdown path.
  await worker.kill('SIGTERM');
  await api.kill('SIGTERM');
  expect(worker.process.exitCode).toBe(0);
  expect(api.process.exitCode).toBe(0);
});
