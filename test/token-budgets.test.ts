import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import type { WorkerHandle } from '../src/worker/worker.ts';
import { createChatAgent } from '../src/lib/agents/chat.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { TransientError } from '../src/lib/sdk/errors.ts';
import { durableModel } from '../src/lib/sdk/ai.ts';
import { budgetRefuses, nextUtcMidnight, utcDay } from '../src/lib/engine/flow/budgets.ts';
import { estimateCallTokens } from '../src/lib/sdk/token-estimate.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { runEvents } from './helpers/engine.ts';
import { scrape, total } from './helpers/prom-text.ts';

/**
 * A scope's daily token budget (`tokensPerDay`, the scope's limits hash), checked by the
 * worker before each model call it would make: real API and worker (one worker slot, so a
 * run holding it would stall every other), real Redis, the fake OpenAI server reporting the
 * usage each call costs.
 */
let h: Harness;
let fake: FakeOpenAI;
let api: ApiHandle;
let worker: WorkerHandle;

/** Bodies of `hand` that ran, by run id: a refused call's body never runs. */
const handCalls = new Map<string, number>();
/** Runs of `flaky` whose first attempt failed after its model call was stored. */
const flakyFailed = new Set<string>();

/** An agent calling its model by hand, with no estimate: `tokens` (metadata) reported for its one call. */
const hand = defineAgent({
  name: 'hand',
  async run(ctx) {
    const text = await ctx.infer('think', (call) => {
      handCalls.set(ctx.runId, (handCalls.get(ctx.runId) ?? 0) + 1);
      call.recordUsage({ model: 'hand-model', inputTokens: Number(ctx.metadata.tokens), outputTokens: 0 });
      return 'thought';
    });
    return text;
  },
});

/** One model call (600 tokens), then a transient failure in the first attempt: the retry finds the call in the memo. */
const flaky = defineAgent({
  name: 'flaky',
  maxAttempts: 3,
  async run(ctx) {
    const text = await ctx.infer('think', (call) => {
      call.recordUsage({ model: 'hand-model', inputTokens: 500, outputTokens: 100 });
      return 'thought';
    }, { estimatedTokens: 10 });
    if (!flakyFailed.has(ctx.runId)) {
      flakyFailed.add(ctx.runId);
      throw new TransientError('the tool after the model call is busy');
    }
    return text;
  },
});

/** The AI SDK's loop through baton/ai: one call, asking for at most `maxOutputTokens` (metadata), generated or streamed. */
const aiWriter = (baseURL: string) => defineAgent({
  name: 'ai-writer',
  async run(ctx) {
    const model = durableModel(ctx, createOpenAI({ baseURL, apiKey: 'test-key' }).chat('fake-model'));
    const call = { model, prompt: ctx.input.content, maxOutputTokens: Number(ctx.metadata.maxOutputTokens), abortSignal: ctx.signal };
    if (ctx.metadata.mode === 'stream') return await streamText(call).text;
    return (await generateText(call)).text;
  },
});

/** Sets a scope's budget the way the limits route stores it. */
const setBudget = (scope: string, tokensPerDay: number) => h.redis.hset(h.keys.scope(scope).limits, 'tokensPerDay', String(tokensPerDay));

const refused = async (action: string) =>
  total((await scrape(`${worker.opsUrl}/metrics`)).samples, 'baton_model_calls_refused_total', { runtime: h.runtime, action });

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  api = await h.startApi();
  // One slot: a run that held it while it waits for its budget would stall every run after it.
  worker = await h.startWorker({
    env: { WORKER_CONCURRENCY: '1' },
    agents: [
      createChatAgent({ name: 'writer', model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key' }), hand, flaky, aiWriter(fake.baseURL),
    ],
  });
});

/** Submits a `writer` run whose one model call the fake answers with `usage`; returns the run id. */
async function write(
  c: ScopeClient, marker: string, usage: { prompt_tokens: number; completion_tokens: number }, extra: Record<string, unknown> = {},
) {
  fake.script(marker, [answer(`Done ${marker}.`, { usage })]);
  const { content, ...rest } = extra as { content?: string };
  const sub = await c.submit(`s-${marker.slice(1)}`, `${content ?? 'Write'} ${marker}`, { agent: 'writer', ...rest });
  expect(sub.status).toBe(202);
  return sub.body.id as string;
}

describe('the rule', () => {
  it('refuses a call whose estimate would pass the budget; without an estimate, only once the budget is used up', () => {
    expect(budgetRefuses(800, 1000, 200)).toBe(false);
    expect(budgetRefuses(800, 1000, 201)).toBe(true);
    expect(budgetRefuses(999, 1000)).toBe(false);
    expect(budgetRefuses(1000, 1000)).toBe(true);
    expect(budgetRefuses(1000, 1000, 0)).toBe(false);
    expect(estimateCallTokens('x'.repeat(400), 50)).toBe(150);
    expect(estimateCallTokens({ messages: [] })).toBe(Math.ceil('{"messages":[]}'.length / 4));
    expect(nextUtcMidnight(Date.parse('2025-03-04T23:59:59.999Z'))).toBe(Date.parse('2025-03-05T00:00:00.000Z'));
    expect(nextUtcMidnight(Date.parse('2025-03-05T00:00:00.000Z'))).toBe(Date.parse('2025-03-06T00:00:00.000Z'));
  });
});

describe('a scope with tokensPerDay 1000', () => {
  it('gets BUDGET_EXCEEDED on the model call that would pass it, before the call; its runs without one and another scope go on', async () => {
    const acme = await h.client(api.url, 'acme', 'admin');
    const globex = await h.client(api.url, 'globex', 'admin');
    await setBudget('acme', 1000);
    const refusedBefore = await refused('failed');
    const usage = { prompt_tokens: 300, completion_tokens: 100 };

    // 400 tokens a call: two calls use 800.
    for (const marker of ['#a1', '#a2']) {
      const run = await acme.waitStatus(await write(acme, marker, usage), ['succeeded', 'failed'], 30_000);
      expect(run.status).toBe('succeeded');
    }
    // The third asks with a long prompt: its estimate (the messages as sent, about 4 characters a
    // token) is over the 200 left, so it is refused before the model sees it.
    const longId = await write(acme, '#a3', usage, { content: 'Summarise: ' + 'lorem ipsum '.repeat(80) });
    const long = await acme.waitStatus(longId, ['succeeded', 'failed'], 30_000);
    expect(long.status).toBe('failed');
    expect(long.lastError).toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(long.lastError.details).toEqual([
      { tokensPerDay: 1000, usedToday: 800, estimate: expect.any(Number), resetsAt: new Date(nextUtcMidnight(Date.now())).toISOString() },
    ]);
    expect(long.lastError.details[0].estimate).toBeGreaterThan(200);
    expect(long.attempt).toBe(1);
    expect(fake.requestsFor('#a3')).toHaveLength(0);

    // A short one still fits (800 + its estimate <= 1000): the estimate decides, not the
    // tokens the call will report (400, taking the scope to 1200).
    const short = await acme.waitStatus(await write(acme, '#a4', usage), ['succeeded', 'failed'], 30_000);
    expect(short.status).toBe('succeeded');

    // A call with no estimate is refused once the budget is used up: its body never runs.
    const blind = (await acme.submit('s-blind', 'think', { agent: 'hand', metadata: { tokens: 1 } })).body;
    const blindRun = await acme.waitStatus(blind.id, ['succeeded', 'failed'], 30_000);
    expect(blindRun.lastError).toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(handCalls.get(blind.id)).toBeUndefined();

    // The scope's runs without a model call are unaffected.
    const echo = (await acme.submit('s-echo', 'hello')).body;
    expect((await acme.waitStatus(echo.id, ['succeeded', 'failed'])).status).toBe('succeeded');

    // Another scope (no budget) calls its model as it likes, and none of it counts against acme.
    const big = await globex.waitStatus(await write(globex, '#g1', { prompt_tokens: 5000, completion_tokens: 5000 }), ['succeeded', 'failed'], 30_000);
    expect(big.status).toBe('succeeded');
    expect(fake.requestsFor('#g1')).toHaveLength(1);

    // The usage route shows the budget and what is left today.
    const now = Date.now();
    const today = utcDay(now);
    const shown = (await acme.get(`/usage?from=${today}&to=${today}`)).body;
    expect(shown.budget).toEqual({ tokensPerDay: 1000, usedToday: 1200, left: 0, resetsAt: new Date(nextUtcMidnight(now)).toISOString() });
    expect(shown.total.totalTokens).toBe(1200);
    expect((await globex.get(`/usage?from=${today}&to=${today}`)).body.budget).toBeNull();
    // The scope's limits (its admin may read them) show the same total in use.
    const limits = (await acme.get('/limits')).body;
    expect([limits.limits.tokensPerDay, limits.inUse.tokensToday]).toEqual([1000, 1200]);

    expect(await refused('failed') - refusedBefore).toBe(2);
  });

  it('baton/ai: generateText and streamText calls are checked with their maxOutputTokens in the estimate', async () => {
    const soylent = await h.client(api.url, 'soylent', 'admin');
    await setBudget('soylent', 300);
    const run = async (marker: string, mode: string, maxOutputTokens: number) => {
      fake.script(marker, [answer(`Done ${marker}.`, { usage: { prompt_tokens: 20, completion_tokens: 5 } })]);
      const sub = (await soylent.submit(`s-${marker.slice(1)}`, `Write ${marker}`, { agent: 'ai-writer', metadata: { mode, maxOutputTokens } })).body;
      return soylent.waitStatus(sub.id, ['succeeded', 'failed'], 30_000);
    };
    // The prompt is a few tokens; asking for up to 250 more still fits 300.
    expect(await run('#s1', 'generate', 250)).toMatchObject({ status: 'succeeded', result: { answer: 'Done #s1.' } });
    expect(await run('#s2', 'stream', 250)).toMatchObject({ status: 'succeeded', result: { answer: 'Done #s2.' } });
    // 50 used: 50 + a few + 280 would pass 300, so neither call reaches the provider.
    for (const [marker, mode] of [['#s3', 'generate'], ['#s4', 'stream']]) {
      const refusedRun = await run(marker, mode, 280);
      expect(refusedRun.status).toBe('failed');
      expect(refusedRun.lastError).toMatchObject({ code: 'BUDGET_EXCEEDED', details: [{ tokensPerDay: 300, usedToday: 50 }] });
      expect(fake.requestsFor(marker)).toHaveLength(0);
    }
  });

  it('a memoized model call that replays makes no call and is not refused', async () => {
    const hooli = await h.client(api.url, 'hooli', 'admin');
    await setBudget('hooli', 500);
    // Attempt 1: the call fits (0 used), costs 600, then the agent fails transiently. Attempt 2
    // takes the call from the memo: the budget (600 >= 500) would refuse a new one.
    const sub = (await hooli.submit('s-flaky', 'go', { agent: 'flaky' })).body;
    const run = await hooli.waitStatus(sub.id, ['succeeded', 'failed'], 30_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 2, result: { usage: { totalTokens: 600, modelCalls: 1 } } });
  });

  it('with onBudget "wait" parks the run holding no slot, and goes on when the day turns', async () => {
    const initech = await h.client(api.url, 'initech', 'admin');
    await setBudget('initech', 1000);
    const before = await refused('waiting');
    const spent = await initech.waitStatus(await write(initech, '#i1', { prompt_tokens: 900, completion_tokens: 100 }), ['succeeded', 'failed'], 30_000);
    expect(spent.status).toBe('succeeded');

    const id = await write(initech, '#i2', { prompt_tokens: 30, completion_tokens: 10 }, { onBudget: 'wait' });
    const waiting = await initech.waitStatus(id, ['waiting', 'succeeded', 'failed'], 30_000);
    expect(waiting.status).toBe('waiting');
    expect(waiting.onBudget).toBe('wait');
    const midnight = nextUtcMidnight(Date.now());
    expect(waiting.waits).toEqual([{
      key: 'wait:token-budget:1', kind: 'budget', name: 'token-budget', since: expect.any(String), expiresAt: new Date(midnight).toISOString(),
    }]);
    expect(fake.requestsFor('#i2')).toHaveLength(0);
    // It holds no scope slot and no worker slot: the worker's only slot runs another run of the scope meanwhile.
    expect(await h.redis.hget(h.keys.scope('initech').meta, 'active')).toBe('0');
    const echo = (await initech.submit('s-echo', 'meanwhile')).body;
    expect((await initech.waitStatus(echo.id, ['succeeded', 'failed'])).status).toBe('succeeded');
    // Nobody resumes it but the day.
    const resume = await initech.post(`/runs/${id}/waits/wait:token-budget:1`, { value: null });
    expect([resume.status, resume.body.error?.code]).toEqual([409, 'WAIT_NOT_PENDING']);
    expect(await refused('waiting') - before).toBe(1);
    const gauge = await scrape(`${api.url}/metrics`);
    expect(total(gauge.samples, 'baton_runs_waiting', { runtime: h.runtime, kind: 'budget' })).toBe(1);

    // The day turns, without waiting a day: today's usage becomes yesterday's (what the next
    // UTC day's check sees: a day with nothing used yet), and the wait's deadline, the next
    // midnight, is moved to now. The sweeper then ends the wait as it would at midnight.
    const sk = h.keys.scope('initech');
    const day = utcDay(Date.now());
    await h.redis.rename(sk.usage(day), sk.usage(utcDay(Date.parse(day) - 86_400_000)));
    const stored = JSON.parse((await h.redis.hget(sk.waits(id), 'wait:token-budget:1'))!);
    await h.redis.hset(sk.waits(id), 'wait:token-budget:1', JSON.stringify({ ...stored, expiresAt: Date.now() }));
    await h.redis.zadd(sk.timers, Date.now(), `wait:${id}`);

    const done = await initech.waitStatus(id, ['succeeded', 'failed'], 30_000);
    expect(done).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'Done #i2.', usage: { totalTokens: 40, modelCalls: 1 } } });
    expect(fake.requestsFor('#i2')).toHaveLength(1);
    const events = await runEvents(h, 'initech', id);
    const queued = events.filter((e) => e.type === 'status' && e.data.status === 'queued' && e.data.wait);
    expect(queued.map((e) => e.data.wait)).toEqual([{ key: 'wait:token-budget:1', outcome: 'slept' }]);
    // The wait's step is its end, as a sleep's: not a timeout.
    const step = JSON.parse((await h.redis.hget(sk.steps(id), 'wait:token-budget:1'))!);
    expect(step).toMatchObject({ v: null });
    expect(step.timedOut).toBeUndefined();
    await waitFor(async () => total((await scrape(`${api.url}/metrics`)).samples, 'baton_runs_waiting', { runtime: h.runtime, kind: 'budget' }) === 0);
  });

  it('with onBudget "wait", a call no whole day\'s budget could take fails at once', async () => {
    const umbrella = await h.client(api.url, 'umbrella', 'admin');
    await setBudget('umbrella', 100);
    const id = await write(umbrella, '#u1', { prompt_tokens: 1, completion_tokens: 1 }, { onBudget: 'wait', content: 'x'.repeat(1000) });
    const run = await umbrella.waitStatus(id, ['waiting', 'succeeded', 'failed'], 30_000);
    expect(run.status).toBe('failed');
    expect(run.lastError.code).toBe('BUDGET_EXCEEDED');
    expect(run.lastError.message).toContain("more than a whole day's budget");
    expect(fake.requestsFor('#u1')).toHaveLength(0);
  });

  it("counts a day an earlier version began (rows, no total) from its rows' sum", async () => {
    const oldco = await h.client(api.url, 'oldco', 'admin');
    const sk = h.keys.scope('oldco');
    const day = utcDay(Date.now());
    // What a version before the day's total wrote: rows only.
    await h.redis.hset(sk.usage(day), 'in:old-agent:m', '700', 'out:old-agent:m', '250', 'calls:old-agent:m', '3');
    await setBudget('oldco', 1000);
    const sub = (await oldco.submit('s-old', 'think', { agent: 'hand', metadata: { tokens: 40 } })).body;
    expect((await oldco.waitStatus(sub.id, ['succeeded', 'failed'], 30_000)).status).toBe('succeeded');
    expect(await h.redis.hget(sk.usage(day), 'tokens')).toBe('990');
    const next = (await oldco.submit('s-old', 'think', { agent: 'hand', metadata: { tokens: 40 } })).body;
    expect((await oldco.waitStatus(next.id, ['succeeded', 'failed'], 30_000)).status).toBe('succeeded');
    // 990 < 1000 let the call with no estimate through; now 1030: the next is refused.
    const last = (await oldco.submit('s-old', 'think', { agent: 'hand', metadata: { tokens: 40 } })).body;
    expect((await oldco.waitStatus(last.id, ['succeeded', 'failed'], 30_000)).lastError?.code).toBe('BUDGET_EXCEEDED');
    expect(await h.redis.hget(sk.usage(day), 'tokens')).toBe('1030');
  });

  it('onBudget is checked at submit: anything but fail or wait is a 400 that makes no run', async () => {
    const acme = await h.client(api.url, 'acme', 'admin');
    const runsBefore = await h.redis.zcard(h.keys.scope('acme').runs);
    const res = await acme.submit('s-bad', 'hello', { onBudget: 'sometimes' });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_FAILED');
    expect(res.body.error.details.map((d: { path: string }) => d.path)).toEqual(['body.onBudget']);
    expect(await h.redis.zcard(h.keys.scope('acme').runs)).toBe(runsBefore);
  });
});
