import { beforeAll, describe, expect, it } from 'vitest';
import { createChatAgent } from '../src/lib/agents/chat.ts';
import { defineAgent, type InferCall } from '../src/lib/sdk/agent.ts';
import { RetryAfterError } from '../src/lib/sdk/errors.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { parseRunRecord } from '../src/lib/transitions/record.ts';
import type { UsageRow } from '../src/lib/contract/admin.ts';
import { answer, reportedUsage, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { scrape, total, type Sample } from './helpers/prom-text.ts';

/**
 * Invariant 13 from the outside: every model call made for a run is counted once, in the
 * run's result, in its scope's usage by day (UTC), agent and model, and in
 * baton_model_tokens_total. Real workers and Redis, the fake server's reported usage.
 */
let h: Harness;
let fake: FakeOpenAI;
let url: string;
let opsUrl: string;
let acme: ScopeClient;
let globex: ScopeClient;

let late: InferCall | undefined;

/** An agent calling its model by hand: it records usage itself, then waits ten minutes to retry. */
const costly = defineAgent({
  name: 'costly',
  async run(ctx) {
    await ctx.infer('think', (call) => {
      call.recordUsage({ model: 'hand-model', inputTokens: 9, outputTokens: 1 });
      late = call;
      return 'thought';
    });
    // After its step was stored: counted nowhere (a warning in the log), never twice.
    late!.recordUsage({ model: 'hand-model', inputTokens: 1000, outputTokens: 1000 });
    throw new RetryAfterError('the model asks for a pause', 600_000);
  },
});

/** An agent reporting one call each of the models its input names (`m-0 m-1 …`), as a step of one infer. */
const manyModels = defineAgent({
  name: 'many-models',
  async run(ctx) {
    await ctx.infer('call', (call) => {
      for (const model of ctx.input.content.split(' ')) call.recordUsage({ model, inputTokens: 2, outputTokens: 1 });
      return 'called';
    });
    return 'ok';
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  url = (await h.startApi()).url;
  const common = { model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key' };
  const worker = await h.startWorker({
    agents: [createChatAgent({ ...common, name: 'writer' }), createChatAgent({ ...common, name: 'editor' }), costly, manyModels],
  });
  opsUrl = worker.opsUrl!;
  acme = await h.client(url, 'acme', 'admin');
  globex = await h.client(url, 'globex', 'admin');
});

const DAY_MS = 86_400_000;
const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** Runs `agent` once; returns the run and the rows its model calls must add (by the day each step was stored). */
async function runOnce(c: ScopeClient, agent: string, marker: string, usage: { prompt_tokens: number; completion_tokens: number }) {
  fake.script(marker, [answer(`Done ${marker}.`, { usage })]);
  const sub = await c.submit(`s-${marker.slice(1)}`, `Write ${marker}`, { agent });
  const run = await c.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
  expect(run.status).toBe('succeeded');
  expect(run.result.usage).toEqual(reportedUsage(fake.requestsFor(marker)));
  const [step] = (await c.get(`/runs/${run.id}/steps`)).body.steps;
  const row: UsageRow = {
    day: dayOf(Date.parse(step.finishedAt)), agent, model: 'fake-model',
    inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens,
    totalTokens: usage.prompt_tokens + usage.completion_tokens, modelCalls: 1,
  };
  return { run, row };
}

/** Rows summed by (day, agent, model), sorted as the route sorts them. */
function expectedRows(rows: UsageRow[]): UsageRow[] {
  const by = new Map<string, UsageRow>();
  for (const r of rows) {
    const k = `${r.day} ${r.agent} ${r.model}`;
    const have = by.get(k);
    if (!have) by.set(k, { ...r });
    else for (const f of ['inputTokens', 'outputTokens', 'totalTokens', 'modelCalls'] as const) have[f] += r[f];
  }
  return [...by.values()].sort((a, b) => (a.day + a.agent + a.model < b.day + b.agent + b.model ? -1 : 1));
}

const sumOf = (rows: UsageRow[]) => rows.reduce(
  (t, r) => ({
    inputTokens: t.inputTokens + r.inputTokens, outputTokens: t.outputTokens + r.outputTokens,
    totalTokens: t.totalTokens + r.totalTokens, modelCalls: t.modelCalls + r.modelCalls,
  }),
  { inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: 0 },
);

const tokens = (s: Sample[], agent: string, kind: string) => total(s, 'baton_model_tokens_total', { agent, kind });

describe('usage by scope, day, agent and model', () => {
  it('two scopes, two days, two agents: each call counted once, where it belongs', async () => {
    const before = (await scrape(`${opsUrl}/metrics`)).samples;
    const acmeRows = [
      (await runOnce(acme, 'writer', '#u-w1', { prompt_tokens: 11, completion_tokens: 3 })).row,
      (await runOnce(acme, 'writer', '#u-w2', { prompt_tokens: 13, completion_tokens: 4 })).row,
      (await runOnce(acme, 'editor', '#u-e1', { prompt_tokens: 20, completion_tokens: 5 })).row,
    ];
    const globexRows = [(await runOnce(globex, 'writer', '#u-g1', { prompt_tokens: 7, completion_tokens: 2 })).row];

    // The day before: a model call stored by a worker whose clock read yesterday, made here through
    // the step transition on a running run of acme (its worker holds fence `fence`).
    const sub = await acme.submit('u-yesterday', 'a b c d e f', { agent: 'echo', metadata: { delayMs: 300 } });
    await acme.waitStatus(sub.body.id, ['running']);
    const sk = h.keys.scope('acme');
    const record = parseRunRecord(await h.redis.hgetall(sk.run(sub.body.id)))!;
    const attempt = new Attempt(record, record.fence, sk);
    const at = Date.now() - DAY_MS;
    const write = {
      op: 'done' as const, stepKey: 'infer:yesterday:1', result: '{"v":"stored"}',
      usage: { agent: 'editor', at, calls: [{ model: 'fake-model', inputTokens: 5, outputTokens: 6 }] },
    };
    const t = h.gateways();
    expect(await t.worker.of(attempt).step(write)).toBe('{"v":"stored"}');
    // The same write again (a reply lost, the write resent): the result is already stored, nothing is counted.
    expect(await t.worker.of(attempt).step({ ...write, result: '{"v":"again"}' })).toBe('{"v":"stored"}');
    expect(await h.redis.hmget(sk.run(sub.body.id), 'usageIn', 'usageOut', 'usageCalls')).toEqual(['5', '6', '1']);
    acmeRows.push({ day: dayOf(at), agent: 'editor', model: 'fake-model', inputTokens: 5, outputTokens: 6, totalTokens: 11, modelCalls: 1 });
    await acme.waitStatus(sub.body.id, ['succeeded']);

    const days = [...acmeRows, ...globexRows].map((r) => r.day).sort();
    const [from, to] = [days[0], days.at(-1)!];
    expect(from).not.toBe(to);
    const a = await acme.get(`/usage?from=${from}&to=${to}`);
    expect(a.status).toBe(200);
    expect(a.body).toEqual({ scope: 'acme', from, to, rows: expectedRows(acmeRows), total: sumOf(acmeRows), nextCursor: null, budget: null });
    expect(new Set(a.body.rows.map((r: UsageRow) => r.agent))).toEqual(new Set(['writer', 'editor']));
    const g = await globex.get(`/usage?from=${from}&to=${to}`);
    expect(g.body).toEqual({ scope: 'globex', from, to, rows: expectedRows(globexRows), total: sumOf(globexRows), nextCursor: null, budget: null });
    // A range with no usage at all.
    const empty = await acme.get('/usage?from=2001-01-01&to=2001-01-31');
    expect(empty.body).toEqual({ scope: 'acme', from: '2001-01-01', to: '2001-01-31', rows: [], total: sumOf([]), nextCursor: null, budget: null });

    // The worker counted the calls it stored (the one written above came from no worker).
    const after = await waitFor(async () => {
      const s = (await scrape(`${opsUrl}/metrics`)).samples;
      return tokens(s, 'editor', 'input') - tokens(before, 'editor', 'input') >= 20 ? s : undefined;
    }, 10_000, 'the worker to count the editor run');
    expect(tokens(after, 'writer', 'input') - tokens(before, 'writer', 'input')).toBe(11 + 13 + 7);
    expect(tokens(after, 'writer', 'output') - tokens(before, 'writer', 'output')).toBe(3 + 4 + 2);
    expect([tokens(after, 'editor', 'input') - tokens(before, 'editor', 'input'), tokens(after, 'editor', 'output') - tokens(before, 'editor', 'output')]).toEqual([20, 5]);
  });

  it('a call recorded by hand counts once, and stays on a run cancelled while it waited to retry', async () => {
    const sub = await globex.submit('u-costly', 'think', { agent: 'costly' });
    await globex.waitStatus(sub.body.id, ['retrying']);
    expect((await globex.post(`/runs/${sub.body.id}/cancel`, {})).status).toBe(200);
    const run = await globex.waitStatus(sub.body.id, ['cancelled']);
    expect(run.result).toMatchObject({ finishReason: 'cancelled', usage: { inputTokens: 9, outputTokens: 1, totalTokens: 10, modelCalls: 1 } });
    const [step] = (await globex.get(`/runs/${run.id}/steps`)).body.steps;
    const day = dayOf(Date.parse(step.finishedAt));
    const usage = (await globex.get(`/usage?from=${day}&to=${day}`)).body;
    expect(usage.rows.filter((r: UsageRow) => r.agent === 'costly')).toEqual([
      { day, agent: 'costly', model: 'hand-model', inputTokens: 9, outputTokens: 1, totalTokens: 10, modelCalls: 1 },
    ]);
  });

  it('a scope adds at most USAGE_ROWS_PER_DAY (200) rows a day; later calls are counted under _other, and every total stays exact', async () => {
    // Before, one run reporting 5,004 made-up model names added 5,004 rows.
    const wide = await h.client(url, 'wide', 'admin');
    const cap = 200;
    const names = (from: number, n: number) => Array.from({ length: n }, (_, i) => `m-${String(from + i).padStart(3, '0')}`);
    const run1 = await wide.submit('many', names(0, 250).join(' '), { agent: 'many-models' });
    expect((await wide.waitStatus(run1.body.id, ['succeeded', 'failed'], 30_000)).status).toBe('succeeded');
    // Another run the same day: a model with a row counts there, a new one in the catch-all row.
    const run2 = await wide.submit('many', 'm-007 brand-new', { agent: 'many-models' });
    expect((await wide.waitStatus(run2.body.id, ['succeeded', 'failed'], 30_000)).status).toBe('succeeded');
    const [step] = (await wide.get(`/runs/${run2.body.id}/steps`)).body.steps;
    const day = dayOf(Date.parse(step.finishedAt));
    const usage = (await wide.get(`/usage?from=${day}&to=${day}`)).body;
    const rows = usage.rows as UsageRow[];
    expect(rows).toHaveLength(cap + 1);
    const other = rows.find((r) => r.agent === '_other');
    expect(other).toEqual({ day, agent: '_other', model: '_other', inputTokens: 51 * 2, outputTokens: 51, totalTokens: 51 * 3, modelCalls: 51 });
    expect(rows.find((r) => r.model === 'm-007')).toMatchObject({ agent: 'many-models', modelCalls: 2, inputTokens: 4 });
    expect(rows.filter((r) => r.agent === 'many-models').map((r) => r.model)).toEqual(names(0, cap));
    expect(usage.total).toEqual({ inputTokens: 252 * 2, outputTokens: 252, totalTokens: 252 * 3, modelCalls: 252 });
    // The run's own usage by model is bounded the same way, its totals exact.
    const own = (await wide.get(`/runs/${run1.body.id}/usage`)).body;
    expect(own.total).toEqual({ inputTokens: 500, outputTokens: 250, totalTokens: 750, modelCalls: 250 });
    expect(own.models).toHaveLength(cap + 1);
    expect(own.models.find((m: { model: string }) => m.model === '_other')).toMatchObject({ modelCalls: 50, inputTokens: 100 });
    // Three fields a row, and the day's total the token budget is checked against.
    expect(await h.redis.hlen(h.keys.scope('wide').usage(day))).toBe(3 * (cap + 1) + 1);
    expect(await h.redis.hget(h.keys.scope('wide').usage(day), 'tokens')).toBe(String(252 * 3));
    expect(h.config.USAGE_ROWS_PER_DAY).toBe(cap);
  });

  it("another scope's key gets 404, a client key 403, and a bad range 400", async () => {
    const q = '/usage?from=2024-01-01&to=2024-01-31';
    const asGlobex = await call(url, 'GET', `/v1/scopes/acme${q}`, undefined, { authorization: `Bearer ${await h.key('globex', 'admin')}` });
    expect([asGlobex.status, asGlobex.body.error.code]).toEqual([404, 'NOT_FOUND']);
    const asClient = await call(url, 'GET', `/v1/scopes/acme${q}`, undefined, { authorization: `Bearer ${await h.key('acme', 'client')}` });
    expect([asClient.status, asClient.body.error.code]).toEqual([403, 'FORBIDDEN']);

    const refused = async (query: string) => {
      const res = await acme.get(`/usage${query}`);
      expect(res.status, query).toBe(400);
      return res.body.error.details.map((d: { path: string }) => d.path);
    };
    expect(await refused('')).toEqual(['query.from', 'query.to']);
    expect(await refused('?from=2024-02-30&to=2024-03-01')).toEqual(['query.from']);
    expect(await refused('?from=2024-03-02&to=2024-03-01')).toEqual(['query.to']);
    // At most 366 days: a leap year fits, a day more does not.
    expect((await acme.get('/usage?from=2024-01-01&to=2024-12-31')).status).toBe(200);
    expect(await refused('?from=2024-01-01&to=2025-01-01')).toEqual(['query.to']);
    expect(await refused('?from=2024-01-01&to=2024-01-02&scope=globex')).toEqual(['query']);
  });
});
