import { Writable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHandle } from '../src/api/server.ts';
import type { Agent } from '../src/lib/sdk/agent.ts';
import { checkReadiness } from '../src/lib/ops/health.ts';
import { createLogger } from '../src/lib/logger.ts';
import { Metrics } from '../src/lib/ops/metrics.ts';
import { OTHER } from '../src/lib/ops/metrics-labels.ts';
import { builtinAgents } from '../src/worker/agents-loader.ts';
import { startWorker, type WorkerHandle } from '../src/worker/worker.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { parseMetrics, promtoolCheck, scrape, select, total, type Sample } from './helpers/prom-text.ts';
import { skipWithout } from './helpers/programs.ts';
import { track } from './helpers/resources.ts';
import { broken, flaky, waiter } from './fixtures/metrics-agents.ts';

let h: Harness;
let api: ApiHandle;
let worker: WorkerHandle;
let acme: ScopeClient;
const logLines: Record<string, unknown>[] = [];

/** A pino destination that keeps every JSON line, to check what the logs carry. */
function captureLogs() {
  return createLogger('info', new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line) logLines.push(JSON.parse(line));
      done();
    },
  }) as unknown as Parameters<typeof createLogger>[1]);
}

beforeAll(async () => {
  h = await useHarness();
  const log = captureLogs();
  api = await startApi({ config: h.config, redisUrl: h.redisUrl, log });
  track(api, () => api.close());
  const agents = new Map<string, Agent>([...builtinAgents(h.config), flaky, broken, waiter].map((a) => [a.name, a]));
  worker = await startWorker({ config: h.config, redisUrl: h.redisUrl, log, agents });
  track(worker, () => worker.close());
  acme = await h.client(api.url, 'acme', 'admin');
});

const apiMetrics = () => scrape(`${api.url}/metrics`);
const workerMetrics = () => scrape(`${worker.opsUrl}/metrics`);

/** Value of every series of `name` for this file's runtime, keyed by the listed labels. */
function byLabels(samples: Sample[], name: string, keys: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of select(samples, name, { runtime: h.runtime })) out[keys.map((k) => s.labels[k]).join('/')] = s.value;
  return out;
}

/** Without promtool (a developer's machine that lacks it) its check is skipped by name; CI=true fails instead. */
const noPromtool = skipWithout('prometheus');

describe('GET /metrics', () => {
  it('counts what happened to runs, on the API and on the worker', async () => {
    const beforeApi = (await apiMetrics()).samples;
    const beforeWorker = (await workerMetrics()).samples;
    const rt = { runtime: h.runtime };

    // Three echo runs (6 tokens) and a slow one (3 tokens); a flaky run that retries once; a
    // broken one; a waiter holding its session, with an echo run queued behind it that the
    // API cancels before it starts, then the waiter cancelled while it runs (by its worker).
    const echoes = [['e1', 'one two three'], ['e2', 'four five'], ['e3', 'six'], ['slow', 's1 s2 s3']] as const;
    const ids: string[] = [];
    for (const [session, content] of echoes) {
      ids.push((await acme.submit(session, content, session === 'slow' ? { metadata: { delayMs: 300 } } : {})).body.id);
    }
    const flakyRun = await acme.submit('f', 'x', { agent: 'flaky' });
    const brokenRun = await acme.submit('b', 'x', { agent: 'broken' });
    const holder = await acme.submit('c', 'hold', { agent: 'waiter' });
    const queued = await acme.submit('c', 'never runs');
    expect(queued.body.status).toBe('queued');
    expect((await acme.post(`/runs/${queued.body.id}/cancel`)).body.status).toBe('cancelled');
    await acme.waitStatus(holder.body.id, ['running']);
    await acme.post(`/runs/${holder.body.id}/cancel`);
    for (const id of ids) await acme.waitStatus(id, ['succeeded']);
    await acme.waitStatus(flakyRun.body.id, ['succeeded']);
    await acme.waitStatus(brokenRun.body.id, ['failed']);
    await acme.waitStatus(holder.body.id, ['cancelled']);
    // A request without a key and one for no route: both must show up by status.
    expect((await call(api.url, 'GET', '/v1/scopes/acme/runs')).status).toBe(401);
    expect((await call(api.url, 'GET', '/nope')).status).toBe(404);

    // The worker counts a finish right after its transition: wait until all seven are in.
    const delta = (after: Sample[], before: Sample[], name: string, match: Record<string, string> = {}) =>
      total(after, name, { ...rt, ...match }) - total(before, name, { ...rt, ...match });
    const w = await waitFor(async () => {
      const s = (await workerMetrics()).samples;
      return delta(s, beforeWorker, 'baton_runs_finished_total') === 7 ? s : undefined;
    }, 15_000, 'the worker to count 7 finished runs');
    const a = (await apiMetrics()).samples;

    const submitted = (agent: string) => delta(a, beforeApi, 'baton_runs_submitted_total', { agent });
    expect([submitted('echo'), submitted('flaky'), submitted('broken'), submitted('waiter')]).toEqual([5, 1, 1, 1]);
    // The queued run was cancelled by the API itself (no worker held it): the API counts it.
    expect(delta(a, beforeApi, 'baton_runs_finished_total', { agent: 'echo', status: 'cancelled' })).toBe(1);
    expect(delta(a, beforeApi, 'baton_runs_finished_total')).toBe(1);

    const finished = (agent: string, status: string) => delta(w, beforeWorker, 'baton_runs_finished_total', { agent, status });
    expect(finished('echo', 'succeeded')).toBe(4);
    expect(finished('flaky', 'succeeded')).toBe(1);
    expect(finished('broken', 'failed')).toBe(1);
    // The running waiter was cancelled through its worker: the worker counts it.
    expect(finished('waiter', 'cancelled')).toBe(1);
    const started = (agent: string) => delta(w, beforeWorker, 'baton_runs_started_total', { agent });
    expect([started('echo'), started('flaky'), started('broken'), started('waiter')]).toEqual([4, 2, 1, 1]);
    expect(delta(w, beforeWorker, 'baton_run_retries_total', { agent: 'flaky' })).toBe(1);
    expect(delta(w, beforeWorker, 'baton_run_retries_total')).toBe(1);
    expect(delta(w, beforeWorker, 'baton_lease_recoveries_total')).toBe(0);
    expect(delta(w, beforeWorker, 'baton_runs_blocked_total')).toBe(0);
    expect(delta(w, beforeWorker, 'baton_memo_misses_total', { kind: 'step' })).toBe(1);
    expect(delta(w, beforeWorker, 'baton_memo_hits_total', { kind: 'step' })).toBe(1);
    expect(delta(w, beforeWorker, 'baton_tokens_streamed_total', { agent: 'echo' })).toBe(9);
    expect(delta(w, beforeWorker, 'baton_tokens_streamed_total', { agent: 'flaky' })).toBe(1);
    const appends = delta(w, beforeWorker, 'baton_event_log_appends_total');
    const events = delta(w, beforeWorker, 'baton_event_log_events_total');
    console.log(`event log: ${appends} append round trips carried ${events} events for 10 tokens`);
    expect(appends).toBeGreaterThan(0);
    expect(events).toBeGreaterThanOrEqual(appends);

    // Histograms: one duration per finished run (by status), one queue wait per first claim.
    expect(delta(w, beforeWorker, 'baton_run_duration_seconds_count', { status: 'succeeded' })).toBe(5);
    expect(delta(w, beforeWorker, 'baton_run_duration_seconds_count', { status: 'failed' })).toBe(1);
    expect(delta(w, beforeWorker, 'baton_run_duration_seconds_count', { status: 'cancelled' })).toBe(1);
    expect(delta(w, beforeWorker, 'baton_run_queue_wait_seconds_count')).toBe(7);
    const slowSum = delta(w, beforeWorker, 'baton_run_duration_seconds_sum', { agent: 'echo', status: 'succeeded' });
    console.log(`echo run durations sum: ${slowSum.toFixed(3)} s (the slow run alone waits 3 x 300 ms)`);
    expect(slowSum).toBeGreaterThan(0.8);

    // HTTP by route template and status, never by concrete path.
    const http = (route: string, method: string, status: string) =>
      total(a, 'baton_http_request_duration_seconds_count', { route, method, status }) -
      total(beforeApi, 'baton_http_request_duration_seconds_count', { route, method, status });
    expect(http('/v1/scopes/:scope/runs', 'POST', '202')).toBe(8);
    expect(http('/v1/scopes/:scope/runs/:runId/cancel', 'POST', '200')).toBe(2);
    expect(http('/v1/scopes/:scope/runs/:runId', 'GET', '200')).toBeGreaterThanOrEqual(6);
    expect(http('/v1/scopes/:scope/*', 'GET', '401')).toBe(1);
    expect(http('unmatched', 'GET', '404')).toBe(1);
    const routes = new Set(select(a, 'baton_http_request_duration_seconds_count').map((s) => s.labels.route));
    expect([...routes].filter((r) => r.includes('acme') || /\/r[0-9a-z]{10,}/.test(r))).toEqual([]);

    // Gauges read at scrape time: both processes see the runtime's (now empty) queue.
    for (const s of [a, w]) {
      expect(byLabels(s, 'baton_queue_jobs', ['state'])).toEqual({ waiting: 0, prioritized: 0, delayed: 0, active: 0, failed: 0 });
    }
    expect(byLabels(w, 'baton_worker_runs_in_flight', [])).toEqual({ '': 0 });
    // Redis connection health starts at zero for every connection of the process.
    expect(select(a, 'baton_redis_errors_total').map((s) => s.labels.connection)).toEqual(expect.arrayContaining(['api-bull', 'api-cmd', 'api-sub']));
    expect(total(a, 'baton_redis_errors_total', { connection: 'api-cmd' })).toBe(0);
    expect(total(w, 'baton_redis_reconnects_total', { connection: 'worker-cmd' })).toBe(0);
    // Process metrics come along.
    expect(total(a, 'process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(select(w, 'nodejs_eventloop_lag_seconds')).toHaveLength(1);
  });

  it.skipIf(noPromtool)('passes promtool check metrics on both endpoints', async () => {
    for (const [what, got] of [['api', await apiMetrics()], ['worker', await workerMetrics()]] as const) {
      expect(got.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
      const check = promtoolCheck(got.text);
      expect(check.output, `${what}: ${check.output}`).toBe('');
      expect(check.status).toBe(0);
      console.log(`${what}: ${got.samples.length} samples, promtool check metrics: ok`);
    }
  });

  it('counts connected SSE clients while they stream', async () => {
    const before = (await workerMetrics()).samples;
    const sub = await acme.submit('w', 'hold', { agent: 'waiter' });
    await acme.waitStatus(sub.body.id, ['running']);
    const streams = [acme.sse(`/runs/${sub.body.id}/events`), acme.sse(`/runs/${sub.body.id}/events`)];
    await waitFor(async () => total((await apiMetrics()).samples, 'baton_sse_clients') === 2, 10_000, '2 SSE clients');
    expect(byLabels((await workerMetrics()).samples, 'baton_worker_runs_in_flight', [])).toEqual({ '': 1 });

    await acme.post(`/runs/${sub.body.id}/cancel`);
    const ended = await Promise.all(streams);
    expect(ended.map((s) => s.ended)).toEqual([true, true]);
    await waitFor(async () => total((await apiMetrics()).samples, 'baton_sse_clients') === 0, 10_000, 'SSE clients to go');
    const cancelledRuns = (s: Sample[]) => total(s, 'baton_runs_finished_total', { agent: 'waiter', status: 'cancelled' });
    await waitFor(async () => cancelledRuns((await workerMetrics()).samples) === cancelledRuns(before) + 1, 10_000, 'the cancelled run to be counted');
    expect(byLabels((await workerMetrics()).samples, 'baton_worker_runs_in_flight', [])).toEqual({ '': 0 });
  });
});

describe('health', () => {
  it('answers /healthz and /readyz on the API and the worker', async () => {
    expect((await call(api.url, 'GET', '/healthz')).body).toEqual({ ok: true });
    expect(await call(api.url, 'GET', '/readyz')).toMatchObject({ status: 200, body: { ok: true, redis: 'up' } });
    expect((await call(worker.opsUrl!, 'GET', '/healthz')).body).toEqual({ ok: true });
    expect(await call(worker.opsUrl!, 'GET', '/readyz')).toMatchObject({
      status: 200, body: { ok: true, redis: 'up', worker: 'registered' },
    });
  });

  it('reports a worker ready once BullMQ lists it, and not ready once it stops', async () => {
    const w = await h.startWorker();
    // BullMQ opens the worker's named connection in the background: ready within moments.
    const ready = await waitFor(async () => {
      const r = await call(w.opsUrl!, 'GET', '/readyz');
      return r.status === 200 ? r.body : undefined;
    }, 10_000, 'the new worker to be ready');
    expect(ready).toEqual({ ok: true, redis: 'up', worker: 'registered' });
    const closing = w.close();
    expect(await checkReadiness(w.checks)).toMatchObject({ ok: false, worker: 'stopping' });
    await closing;
    await expect(fetch(`${w.opsUrl}/healthz`)).rejects.toThrow();
  });
});

describe('logs', () => {
  it('writes one request line per request with the route template and no key material', async () => {
    const before = logLines.length;
    const res = await acme.get('/runs?limit=1');
    expect(res.status).toBe(200);
    const line = await waitFor(() => logLines.slice(before).find((l) => l.msg === 'request' && l.route === '/v1/scopes/:scope/runs'));
    expect(line).toMatchObject({ method: 'GET', status: 200, path: '/v1/scopes/acme/runs' });
    expect(typeof line.ms).toBe('number');
    expect(JSON.stringify(logLines)).not.toContain(acme.key);
  });

  it('logs each run transition with scope, runtime, runId, sessionId and workerId', async () => {
    const sub = await acme.submit('log-s', 'log me');
    await acme.waitStatus(sub.body.id, ['succeeded']);
    const lines = await waitFor(() => {
      const mine = logLines.filter((l) => l.runId === sub.body.id);
      return mine.some((l) => l.msg === 'run finished') ? mine : undefined;
    });
    const transitions = lines.filter((l) => l.workerId !== undefined);
    expect(transitions.map((l) => l.msg)).toEqual(['run started', 'run finished']);
    for (const l of transitions) {
      expect(l).toMatchObject({ scope: 'acme', runtime: h.runtime, runId: sub.body.id, sessionId: 'log-s', workerId: worker.workerId });
    }
  });
});

describe('labels', () => {
  it('adds the scope label only with METRICS_SCOPE_LABEL, and folds runtimes past the limit', async () => {
    const run = (scope: string, runtime: string) => ({ id: 'r1', scope, runtime, agent: 'echo' }) as never;
    const plain = new Metrics({ scopeLabel: false, labelLimit: 2, defaultMetrics: false });
    // Workers registered these four; past the limit of two, the rest fold into "_other".
    for (const rt of ['a', 'b', 'c', 'd']) plain.registerRuntime(rt, ['echo']);
    for (const rt of ['a', 'b', 'c', 'd']) plain.runSubmitted(run('acme', rt));
    const p = parseMetrics((await plain.expose()).body);
    expect(byRuntime(p)).toEqual({ a: 1, b: 1, [OTHER]: 2 });
    expect(select(p, 'baton_runs_submitted_total').every((s) => !('scope' in s.labels))).toBe(true);

    const scoped = new Metrics({ scopeLabel: true, labelLimit: 100, defaultMetrics: false });
    scoped.registerRuntime('a', ['echo']);
    scoped.runSubmitted(run('acme', 'a'));
    scoped.runSubmitted(run('globex', 'a'));
    scoped.sseOpened('acme');
    const s = parseMetrics((await scoped.expose()).body);
    expect(select(s, 'baton_runs_submitted_total').map((x) => x.labels.scope).sort()).toEqual(['acme', 'globex']);
    expect(select(s, 'baton_sse_clients')).toEqual([{ name: 'baton_sse_clients', labels: { scope: 'acme' }, value: 1 }]);
  });
});

function byRuntime(samples: Sample[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of select(samples, 'baton_runs_submitted_total')) out[s.labels.runtime] = s.value;
  return out;
}
