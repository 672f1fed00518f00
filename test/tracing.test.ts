import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { context, propagation, trace, type AttributeValue } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tracingRequested } from '../src/cli/tracing.ts';
import { createLogger } from '../src/lib/logger.ts';
import { startWorker } from '../src/worker/worker.ts';
import { fxKey } from './fixtures/engine-agents.ts';
import { tracedAgent } from './fixtures/traced-agents.ts';
import { askAgent, closeWaitFixtureRedis, napAgent } from './fixtures/wait-agents.ts';
import { startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * Baton's spans with the SDK's in-memory exporter registered in this process, API and worker
 * in it too: one run's trace against what the run did (docs/tracing.md).
 */
const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();

/** What the run is given, which no attribute may hold unless BATON_TRACE_CONTENT is on. */
const INPUT = 'Zanzibar harbour schedule for the seventh ferry';
const SECRET_ARG = 'quokka-7731-argument';

let h: Harness;
let fake: FakeOpenAI;

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  process.env.FAKE_OPENAI_URL = fake.baseURL;
});

afterAll(async () => {
  await provider.shutdown();
  // register() set the process's tracer provider, context manager and propagator: unset them,
  // so a file this worker runs next traces nothing, as it would in a process of its own.
  trace.disable();
  context.disable();
  propagation.disable();
});

/** An in-process worker serving the fixture, whose log lines are kept. */
async function workerWithLog(env: Record<string, string> = {}) {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const config = h.configWith({ LOG_LEVEL: 'info', ...env });
  const w = await startWorker({ config, redisUrl: h.redisUrl, log: createLogger('info', sink), agents: new Map([[tracedAgent.name, tracedAgent]]) });
  track(w, () => w.close());
  return { worker: w, lines };
}

/** An API whose callers are trusted: a caller's traceparent is the submit's parent, not only linked (BATON_TRACE_CALLER). */
const TRUSTED = { BATON_TRACE_CALLER: 'parent' };

const attr = (s: ReadableSpan, name: string): AttributeValue | undefined => s.attributes[name];
const byStart = (a: ReadableSpan, b: ReadableSpan) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1];
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const ms = (t: [number, number]) => t[0] * 1000 + t[1] / 1e6;

/** The spans of one trace, once its last attempt's span has ended with `outcome`. */
async function traceOf(traceId: string, lastOutcome: string): Promise<ReadableSpan[]> {
  const spans = () => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
  await waitFor(() => spans().some((s) => s.name === 'baton.attempt' && attr(s, 'baton.attempt.outcome') === lastOutcome), 20_000, 'the last attempt span');
  return spans();
}

/** Submits the fixture's run with a caller's `traceparent`, waits for its wait, resumes it through `resumeVia`, and waits for its end. */
async function tracedRun(apiUrl: string, resumeVia: string) {
  const acme = await h.client(apiUrl, 'acme');
  const caller = trace.getTracer('test-caller').startSpan('caller');
  const headers: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), caller), headers);
  const submitted = await acme.post('/runs', {
    sessionId: `s-${Math.random().toString(36).slice(2)}`, input: { content: INPUT }, runtime: h.runtime, agent: 'fx-traced',
    metadata: { secretArg: SECRET_ARG },
  }, headers);
  caller.end();
  expect(submitted.status).toBe(202);
  const runId = submitted.body.id as string;
  await acme.waitStatus(runId, ['waiting']);
  const resumed = await (await h.client(resumeVia, 'acme')).post(`/runs/${runId}/waits/wait:approval:1`, { value: { approved: true } });
  expect(resumed.status).toBe(200);
  const done = await acme.waitStatus(runId, ['succeeded', 'failed']);
  expect(done.status).toBe('succeeded');
  return { runId, caller: caller.spanContext(), done };
}

describe('tracing with the in-memory exporter', () => {
  it('by default a caller\'s traceparent is linked, not followed: the run is a trace of its own, and the caller\'s trace gets no span', async () => {
    const api = await h.startApi();
    await workerWithLog();
    const acme = await h.client(api.url, 'acme');
    // A trace id the tenant knows (another tenant's, the operator's own).
    const victim = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex') };
    const submitted = await acme.post('/runs', {
      sessionId: `s-${Math.random().toString(36).slice(2)}`, input: { content: 'linked' }, runtime: h.runtime, agent: 'fx-traced',
      metadata: { secretArg: SECRET_ARG },
    }, { traceparent: `00-${victim.traceId}-${victim.spanId}-01` });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.id as string;
    await acme.waitStatus(runId, ['waiting']);
    expect((await acme.post(`/runs/${runId}/waits/wait:approval:1`, { value: { approved: true } })).status).toBe(200);
    expect((await acme.waitStatus(runId, ['succeeded', 'failed'])).status).toBe('succeeded');

    const submit = await waitFor(
      () => exporter.getFinishedSpans().find((s) => s.name === 'baton.submit' && attr(s, 'baton.run.id') === runId), 10_000, 'the submit span',
    );
    // A root of a new trace, linking to the caller's span; the run record keeps the new trace's context.
    expect(parentOf(submit)).toBeUndefined();
    expect(submit.spanContext().traceId).not.toBe(victim.traceId);
    expect(submit.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['baton.link']]))
      .toEqual([[victim.traceId, victim.spanId, 'caller']]);
    expect(await h.redis.hget(h.keys.scope('acme').run(runId), 'traceparent'))
      .toBe(`00-${submit.spanContext().traceId}-${submit.spanContext().spanId}-01`);
    // The run's spans (three attempts, their steps, the wait, the finish) are in the run's own
    // trace; the caller's trace id holds none of them.
    const spans = await traceOf(submit.spanContext().traceId, 'succeeded');
    expect(spans.filter((s) => s.name === 'baton.attempt')).toHaveLength(3);
    expect(spans.filter((s) => s.name === 'baton.wait')).toHaveLength(1);
    expect(exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === victim.traceId)).toHaveLength(0);
  });

  it('one run is one trace: the caller\'s traceparent parents baton.submit, every attempt, step, wait and the finish join it', async () => {
    const api = await h.startApi(TRUSTED);
    const otherApi = await h.startApi(TRUSTED);
    const { lines } = await workerWithLog();
    const { runId, caller, done } = await tracedRun(api.url, otherApi.url);
    expect(done.attempt).toBe(2);
    const spans = await traceOf(caller.traceId, 'succeeded');

    // The submit: a child of the caller's span, and its context is what the run record keeps.
    const [submit] = spans.filter((s) => s.name === 'baton.submit');
    expect(parentOf(submit)).toBe(caller.spanId);
    expect(attr(submit, 'baton.run.id')).toBe(runId);
    expect(await h.redis.hget(h.keys.scope('acme').run(runId), 'traceparent'))
      .toBe(`00-${caller.traceId}-${submit.spanContext().spanId}-01`);

    // Three attempts, each a child of the submit: the retried first, the one that parked, the resumed one (attempt 2 again).
    const attempts = spans.filter((s) => s.name === 'baton.attempt').sort(byStart);
    expect(attempts.map((s) => [attr(s, 'baton.attempt.number'), attr(s, 'baton.attempt.outcome'), attr(s, 'baton.attempt.recovered')]))
      .toEqual([[1, 'retrying', false], [2, 'waiting', false], [2, 'succeeded', false]]);
    for (const a of attempts) expect(parentOf(a)).toBe(submit.spanContext().spanId);
    expect(attr(attempts[0], 'baton.attempt.retry_at')).toBeTypeOf('number');
    expect(attr(attempts[0], 'error.type')).toBe('TRANSIENT');

    // Each attempt's children, in order: the memo hits of the steps an earlier attempt stored.
    const children = (a: ReadableSpan) => spans.filter((s) => parentOf(s) === a.spanContext().spanId).sort(byStart)
      .map((s) => (s.name === 'baton.finish' ? s.name : `${s.name} ${attr(s, 'baton.step.key')}${attr(s, 'baton.step.memo_hit') ? ' (memo hit)' : ''}`));
    expect(attempts.map(children)).toEqual([
      ['baton.step step:prepare:1'],
      ['baton.step step:prepare:1 (memo hit)', 'baton.infer infer:draft:1', 'baton.tool tool:lookup:1'],
      [
        'baton.step step:prepare:1 (memo hit)', 'baton.infer infer:draft:1 (memo hit)', 'baton.tool tool:lookup:1 (memo hit)',
        'baton.step step:publish:1', 'baton.finish',
      ],
    ]);

    // The model call carries the GenAI attributes, with the usage the provider reported.
    const [request] = fake.requests.filter((r) => r.messages.at(-1)?.content === INPUT);
    const infer = spans.find((s) => s.name === 'baton.infer' && !attr(s, 'baton.step.memo_hit'))!;
    expect(infer.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'fake-model', 'gen_ai.provider.name': 'openai',
      'gen_ai.usage.input_tokens': request.usage!.prompt_tokens, 'gen_ai.usage.output_tokens': request.usage!.completion_tokens,
    });

    // The wait: from the park to the resume (made by the other API), beside the attempts.
    const waits = spans.filter((s) => s.name === 'baton.wait');
    expect(waits).toHaveLength(1);
    expect(parentOf(waits[0])).toBe(submit.spanContext().spanId);
    expect(waits[0].attributes).toMatchObject({ 'baton.wait.key': 'wait:approval:1', 'baton.wait.kind': 'input', 'baton.wait.outcome': 'resumed' });
    expect(ms(waits[0].startTime)).toBeGreaterThanOrEqual(ms(attempts[1].startTime) - 5);
    expect(ms(waits[0].endTime)).toBeLessThanOrEqual(ms(attempts[2].startTime) + 5);

    // The finish, with the turn committed to the session's history.
    const finish = spans.find((s) => s.name === 'baton.finish')!;
    expect(finish.attributes).toMatchObject({
      'baton.run.status': 'succeeded', 'baton.result.finish_reason': 'stop', 'baton.history.messages': 2, 'baton.history.store': 'redis',
    });

    // The run's log lines carry the trace and their attempt's span.
    const runLines = lines.filter((l) => l.runId === runId);
    expect(runLines.length).toBeGreaterThan(0);
    const attemptSpans = new Set(attempts.map((a) => a.spanContext().spanId));
    for (const line of runLines) {
      expect(line.trace_id).toBe(caller.traceId);
      expect(attemptSpans.has(line.span_id as string)).toBe(true);
    }
    expect(runLines.filter((l) => l.msg === 'run started').map((l) => l.span_id)).toEqual(attempts.map((a) => a.spanContext().spanId));

    // No attribute holds the input, the model's answer (which echoes it) or the tool's arguments.
    const exported = JSON.stringify(exporter.getFinishedSpans().map((s) => [s.name, s.attributes, s.status, s.events, s.links]));
    expect(exported).not.toContain(INPUT);
    expect(exported).not.toContain(SECRET_ARG);
    expect(exported).not.toContain('Zanzibar');
  });

  it('BATON_TRACE_CONTENT=true: the input, the model\'s answer and the tool\'s arguments are attributes', async () => {
    const api = await h.startApi({ ...TRUSTED, BATON_TRACE_CONTENT: 'true' });
    await workerWithLog({ BATON_TRACE_CONTENT: 'true' });
    const { caller } = await tracedRun(api.url, api.url);
    const spans = await traceOf(caller.traceId, 'succeeded');
    expect(attr(spans.find((s) => s.name === 'baton.submit')!, 'baton.input.content')).toBe(INPUT);
    const infer = spans.find((s) => s.name === 'baton.infer' && !attr(s, 'baton.step.memo_hit'))!;
    expect(attr(infer, 'baton.infer.output')).toContain(INPUT);
    const tool = spans.find((s) => s.name === 'baton.tool' && !attr(s, 'baton.step.memo_hit'))!;
    expect(JSON.parse(attr(tool, 'baton.tool.arguments') as string)).toEqual({ query: `Zanzibar ${SECRET_ARG}` });
  });
});

/** A span as an OTLP/HTTP JSON export carries it, with its process's resource. */
interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startMs: number;
  endMs: number;
  attributes: Record<string, unknown>;
  status?: { code?: number; message?: string };
  service: unknown;
  instance: unknown;
}

interface OtlpValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values: OtlpValue[] };
}
const otlpValue = (v: OtlpValue): unknown => v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined)
  ?? v.doubleValue ?? v.arrayValue?.values.map(otlpValue);
const otlpAttributes = (list: { key: string; value: OtlpValue }[] = []) => Object.fromEntries(list.map((a) => [a.key, otlpValue(a.value)]));

/** An OTLP/HTTP trace receiver on 127.0.0.1 decoding JSON exports (OTEL_EXPORTER_OTLP_PROTOCOL=http/json), as a collector would. */
async function startOtlpReceiver(): Promise<{ url: string; spans: ReceivedSpan[]; bodies: string[] }> {
  const spans: ReceivedSpan[] = [];
  const bodies: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => { body += c; });
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') return void res.writeHead(404).end();
      bodies.push(body);
      const doc = JSON.parse(body) as { resourceSpans?: any[] };
      for (const rs of doc.resourceSpans ?? []) {
        const resource = otlpAttributes(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const sp of ss.spans ?? []) {
            spans.push({
              traceId: sp.traceId, spanId: sp.spanId, parentSpanId: sp.parentSpanId || undefined, name: sp.name,
              startMs: Number(BigInt(sp.startTimeUnixNano) / 1_000_000n), endMs: Number(BigInt(sp.endTimeUnixNano) / 1_000_000n),
              attributes: otlpAttributes(sp.attributes), status: sp.status,
              service: resource['service.name'], instance: resource['service.instance.id'],
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  track(server, () => new Promise((resolve) => server.close(resolve)));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, bodies };
}

const FIXTURE = fileURLToPath(new URL('./fixtures/traced-agents.ts', import.meta.url));

describe('tracing across baton processes, exported over OTLP/HTTP', () => {
  it('a run through two APIs and two workers (one SIGKILLed mid-attempt) is one trace at a real receiver', async () => {
    const receiver = await startOtlpReceiver();
    const otel = (instance: string) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_RESOURCE_ATTRIBUTES: `service.instance.id=${instance}`, ...TRUSTED,
    });
    const api = await h.spawn('api', { env: otel('api-1') });
    const otherApi = await h.spawn('api', { env: otel('api-2') });
    const first = await h.spawn('worker', { agents: [FIXTURE], env: { ...otel('worker-1'), FX_TAG: 'worker-1' } });

    const caller = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex') };
    const acme = await h.client(api.url!, 'acme');
    const submitted = await acme.post('/runs', {
      sessionId: 'otlp', input: { content: INPUT }, runtime: h.runtime, agent: 'fx-traced', metadata: { secretArg: SECRET_ARG, hold: true },
    }, { traceparent: `00-${caller.traceId}-${caller.spanId}-01` });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.id as string;
    await acme.waitStatus(runId, ['waiting'], 30_000);
    // Resumed through the other API process.
    expect((await (await h.client(otherApi.url!, 'acme')).post(`/runs/${runId}/waits/wait:approval:1`, { value: { approved: true } })).status)
      .toBe(200);
    // The resumed attempt holds in its step after the wait: the worker dies there, and another recovers the run.
    await waitFor(() => h.redis.get(fxKey(h.prefix, runId, 'reached')), 30_000, 'the step after the wait');
    await first.kill('SIGKILL');
    await h.redis.set(fxKey(h.prefix, runId, 'go'), '1');
    const second = await h.spawn('worker', { agents: [FIXTURE], env: { ...otel('worker-2'), FX_TAG: 'worker-2' } });
    const done = await acme.waitStatus(runId, ['succeeded', 'failed'], 60_000);
    expect(done).toMatchObject({ status: 'succeeded', attempt: 2, recoveries: 1 });
    // A graceful stop exports what each process still holds.
    for (const p of [second, otherApi, api]) await p.kill('SIGTERM');

    const spans = receiver.spans.filter((s) => s.traceId === caller.traceId);
    const one = (name: string) => spans.filter((s) => s.name === name);
    const [submit] = one('baton.submit');
    expect(submit).toMatchObject({ parentSpanId: caller.spanId, service: 'baton-api', instance: 'api-1' });
    expect(submit.attributes['baton.run.id']).toBe(runId);

    // The SIGKILLed attempt never ended its span; the three that did are the submit's children, from both workers.
    const attempts = one('baton.attempt').sort((a, b) => a.startMs - b.startMs);
    expect(attempts.map((a) => [
      a.attributes['baton.attempt.number'], a.attributes['baton.attempt.outcome'], a.attributes['baton.attempt.recovered'], a.instance, a.service,
    ])).toEqual([
      [1, 'retrying', false, 'worker-1', 'baton-worker'],
      [2, 'waiting', false, 'worker-1', 'baton-worker'],
      [2, 'succeeded', true, 'worker-2', 'baton-worker'],
    ]);
    for (const a of attempts) expect(a.parentSpanId).toBe(submit.spanId);

    // The recovering attempt found the steps the dead one and those before it stored, and ran the step it died in again.
    const under = (a: ReceivedSpan) => spans.filter((s) => s.parentSpanId === a.spanId).sort((x, y) => x.startMs - y.startMs)
      .map((s) => `${s.name} ${s.attributes['baton.step.key'] ?? ''}${s.attributes['baton.step.memo_hit'] ? ' (memo hit)' : ''}`.trim());
    expect(under(attempts[2])).toEqual([
      'baton.step step:prepare:1 (memo hit)', 'baton.infer infer:draft:1 (memo hit)', 'baton.tool tool:lookup:1 (memo hit)',
      'baton.step step:publish:1', 'baton.finish',
    ]);
    const infer = spans.find((s) => s.name === 'baton.infer' && !s.attributes['baton.step.memo_hit'])!;
    expect(infer.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'fake-model', 'gen_ai.provider.name': 'openai',
    });
    expect(infer.attributes['gen_ai.usage.input_tokens']).toBeGreaterThan(0);

    // The wait, recorded by the API that resumed it, from the park to the resume.
    const [wait] = one('baton.wait');
    expect(wait).toMatchObject({ parentSpanId: submit.spanId, instance: 'api-2' });
    expect(wait.attributes).toMatchObject({ 'baton.wait.key': 'wait:approval:1', 'baton.wait.outcome': 'resumed' });
    expect(wait.startMs).toBeGreaterThanOrEqual(attempts[1].startMs - 5);
    expect(wait.endMs).toBeLessThanOrEqual(attempts[2].startMs + 5);

    // Nothing the run was given reached the receiver.
    const received = receiver.bodies.join('\n');
    expect(received).not.toContain('Zanzibar');
    expect(received).not.toContain(SECRET_ARG);
  }, 180_000);
});

describe('waits that end by their deadline', () => {
  it('a timed-out wait and a sleep get their baton.wait span from the process that ended them', async () => {
    process.env.REDIS_URL = h.redisUrl;
    process.env.BATON_KEY_PREFIX = h.prefix;
    track(null, closeWaitFixtureRedis);
    const api = await h.startApi();
    await h.startWorker({ agents: [askAgent, napAgent] });
    const acme = await h.client(api.url, 'acme');
    const asked = (await acme.submit('deadline-ask', 'a question', { agent: 'fx-ask', metadata: { timeoutMs: 300 } })).body.id as string;
    const napped = (await acme.submit('deadline-nap', 'a nap', { agent: 'fx-nap', metadata: { ms: 300 } })).body.id as string;
    for (const id of [asked, napped]) expect((await acme.waitStatus(id, ['succeeded', 'failed'])).status).toBe('succeeded');
    const waitOf = (runId: string) => exporter.getFinishedSpans().find((s) => s.name === 'baton.wait' && attr(s, 'baton.run.id') === runId);
    const submitOf = (runId: string) => exporter.getFinishedSpans().find((s) => s.name === 'baton.submit' && attr(s, 'baton.run.id') === runId)!;
    for (const [runId, kind, outcome] of [[asked, 'input', 'timed_out'], [napped, 'sleep', 'slept']] as const) {
      const wait = await waitFor(() => waitOf(runId), 10_000, `the wait span of ${runId}`);
      expect(wait.attributes).toMatchObject({ 'baton.wait.kind': kind, 'baton.wait.outcome': outcome });
      expect(parentOf(wait)).toBe(submitOf(runId).spanContext().spanId);
      expect(ms(wait.endTime) - ms(wait.startTime)).toBeGreaterThanOrEqual(295);
    }
  });
});

describe('when the baton command registers the SDK', () => {
  it('only when an OTLP endpoint or an exporter is named, and not when the SDK is disabled', () => {
    expect(tracingRequested({})).toBe(false);
    expect(tracingRequested({ OTEL_SERVICE_NAME: 'mine', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toBe(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(true);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toBe(true);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toBe(false);
    expect(tracingRequested({ OTEL_TRACES_EXPORTER: 'console' })).toBe(true);
    expect(tracingRequested({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' })).toBe(false);
  });
});
