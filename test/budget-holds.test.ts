import { beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { utcDay } from '../src/lib/engine/flow/budgets.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Calls of one scope in flight at once against its daily token budget: each model call's check
 * holds what the call may use (its estimate, or TOKENS_UNESTIMATED without one) until its
 * tokens are counted, so calls checked together see each other. Counted, not timed: eight runs
 * of one scope hold their model calls open on a gate until every one of them was checked, then
 * the fake OpenAI server answers each with the usage it is scripted to report, and the tokens
 * the scope used are compared with its budget and the bound docs/tenancy.md states.
 */
let h: Harness;
let fake: FakeOpenAI;
let api: ApiHandle;

/** TOKENS_UNESTIMATED as this file's worker has it (the default). */
const UNESTIMATED = 4096;
/** Runs whose model call's body started (passed the budget), by run id. */
const entered = new Set<string>();
/** Opens the gate every `gated` call waits at. */
let openGate: () => void = () => {};
let gate: Promise<void> = Promise.resolve();
const closeGate = () => {
  gate = new Promise<void>((resolve) => { openGate = resolve; });
};

/**
 * One model call, made by hand to the fake server (not streamed), counted with the usage it
 * reports; with `metadata.estimate` its estimate, else none. Its body waits at the gate.
 */
const gated = defineAgent({
  name: 'gated',
  async run(ctx) {
    const estimate = ctx.metadata.estimate === undefined ? undefined : { estimatedTokens: Number(ctx.metadata.estimate) };
    return await ctx.infer('think', async (call) => {
      entered.add(ctx.runId);
      await gate;
      const res = await fetch(`${fake.baseURL}/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer test-key' },
        body: JSON.stringify({ model: 'fake-model', messages: [{ role: 'user', content: ctx.input.content }] }),
      });
      type Completion = { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; completion_tokens: number } };
      const body = await res.json() as Completion;
      call.recordUsage({ model: 'fake-model', inputTokens: body.usage.prompt_tokens, outputTokens: body.usage.completion_tokens });
      return body.choices[0].message.content;
    }, estimate);
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  api = await h.startApi();
  // Eight slots, and the scopes' default maxActive of 8: eight calls of one scope in flight at once.
  await h.startWorker({
    env: { WORKER_CONCURRENCY: '8', OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'test-key', OPENAI_MODEL: 'fake-model' },
    agents: [gated],
  });
});

const setBudget = (scope: string, tokensPerDay: number) => h.redis.hset(h.keys.scope(scope).limits, 'tokensPerDay', String(tokensPerDay));
const usedToday = async (scope: string) => Number(await h.redis.hget(h.keys.scope(scope).usage(utcDay(Date.now())), 'tokens') ?? 0);
/** The holds out now, as `[member, tokens]`. */
const holds = async (scope: string) => (await h.redis.zrange(h.keys.scope(scope).budgetHolds(utcDay(Date.now())), 0, -1))
  .map((m) => Number(m.slice(m.lastIndexOf(':') + 1)));

/**
 * Submits eight `gated` runs of `scope` at once, each reporting 100,000 tokens; waits until
 * each was checked (its body entered, or the run failed), counts the holds out then, opens the
 * gate, and returns the runs as they ended and the holds counted.
 */
async function eightAtOnce(c: ScopeClient, marker: string, metadata: Record<string, unknown>, runtime = h.runtime) {
  closeGate();
  fake.script(marker, [answer('thought', { usage: { prompt_tokens: 60_000, completion_tokens: 40_000 } })]);
  const ids: string[] = [];
  for (let i = 0; i < 8; i++) ids.push((await c.submit(`${marker.slice(1)}-${i}`, `think ${marker}`, { agent: 'gated', metadata, runtime })).body.id as string);
  const failed = new Set<string>();
  await waitFor(async () => {
    for (const id of ids) if (!entered.has(id) && !failed.has(id) && (await c.get(`/runs/${id}`)).body.status === 'failed') failed.add(id);
    return ids.every((id) => entered.has(id) || failed.has(id));
  }, 30_000, 'every call checked');
  const held = await holds(c.scope);
  openGate();
  const runs = await Promise.all(ids.map((id) => c.waitStatus(id, ['succeeded', 'failed'], 30_000)));
  return { runs, held, admitted: ids.filter((id) => entered.has(id)).length };
}

describe('calls of one scope checked at once', () => {
  it('with estimates that hold: of eight calls of 100,000 tokens on a 200,000 budget, two are made; the budget is not passed', async () => {
    const c = await h.client(api.url, 'estimated', 'admin');
    await setBudget('estimated', 200_000);
    const { runs, held, admitted } = await eightAtOnce(c, '#est', { estimate: 100_000 });
    // Checked without holds, all eight passed (each saw 0 used) and used 800,000.
    expect(admitted).toBe(2);
    expect(held).toEqual([100_000, 100_000]);
    expect(runs.filter((r) => r.status === 'succeeded')).toHaveLength(2);
    const refused = runs.filter((r) => r.status === 'failed');
    expect(refused).toHaveLength(6);
    for (const r of refused) expect(r.lastError).toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(fake.requestsFor('#est')).toHaveLength(2);
    expect(await usedToday('estimated')).toBe(200_000);
    // Every hold was let go once its call was counted.
    expect(await holds('estimated')).toEqual([]);
    console.log(`budget 200000, 8 calls of 100000 with estimates: ${admitted} made, ${await usedToday('estimated')} used (1.00x)`);
  });

  it('without estimates: each holds TOKENS_UNESTIMATED, and the overshoot stays within what the calls used beyond their holds', async () => {
    const c = await h.client(api.url, 'blind', 'admin');
    await setBudget('blind', 200_000);
    const { runs, held, admitted } = await eightAtOnce(c, '#blind', {});
    // 8 × 4,096 held fit the budget: all eight are made, as the reproduction had them.
    expect(admitted).toBe(8);
    expect(held).toEqual(Array(8).fill(UNESTIMATED));
    expect(runs.every((r) => r.status === 'succeeded')).toBe(true);
    const used = await usedToday('blind');
    expect(used).toBe(800_000);
    // The documented bound: the budget, plus over the calls admitted, what each used beyond its hold.
    const bound = 200_000 + admitted * (100_000 - UNESTIMATED);
    expect(used).toBeLessThanOrEqual(bound);
    expect(await holds('blind')).toEqual([]);
    // Nothing is left: the next call is refused before it is made.
    const next = (await c.submit('blind-next', 'think #blind', { agent: 'gated' })).body.id as string;
    expect((await c.waitStatus(next, ['succeeded', 'failed'], 30_000)).lastError).toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(fake.requestsFor('#blind')).toHaveLength(8);
    console.log(`budget 200000, 8 calls of 100000 without estimates: ${admitted} made, ${used} used (${(used / 200_000).toFixed(2)}x), bound ${bound}`);
  });

  it('an operator who sets TOKENS_UNESTIMATED to what such calls use gets no overshoot from them', async () => {
    const runtime = `${h.runtime}-strict`;
    await h.startWorker({ env: { RUNTIME: runtime, WORKER_CONCURRENCY: '8', TOKENS_UNESTIMATED: '100000' }, agents: [gated] });
    const c = await h.client(api.url, 'strict', 'admin');
    await setBudget('strict', 200_000);
    const { held, admitted } = await eightAtOnce(c, '#strict', {}, runtime);
    expect(admitted).toBe(2);
    expect(held).toEqual([100_000, 100_000]);
    expect(await usedToday('strict')).toBe(200_000);
  });

  it('the built-in chat agent asks for at most CHAT_MAX_TOKENS and holds its prompt plus that: its calls keep within the budget', async () => {
    const c = await h.client(api.url, 'chatty', 'admin');
    await setBudget('chatty', 10_000);
    // Each answer takes all it may: 4,096 tokens, and the prompt's few.
    fake.script('#chat', [answer('a long answer', { usage: { prompt_tokens: 10, completion_tokens: 4096 } })]);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await c.submit(`chat-${i}`, `go on #chat ${i}`, { agent: 'chat' })).body.id as string);
    const runs = await Promise.all(ids.map((id) => c.waitStatus(id, ['succeeded', 'failed'], 30_000)));
    const made = fake.requestsFor('#chat');
    for (const r of made) expect(r.body.max_completion_tokens).toBe(4096);
    // However the six interleave, a call is made only while its estimate (prompt + 4,096) fits:
    // two of 4,106 fit 10,000, a third never does.
    expect(made).toHaveLength(2);
    expect(runs.filter((r) => r.status === 'succeeded')).toHaveLength(2);
    expect(runs.filter((r) => r.lastError?.code === 'BUDGET_EXCEEDED')).toHaveLength(4);
    const used = await usedToday('chatty');
    expect(used).toBe(2 * 4106);
    expect(used).toBeLessThanOrEqual(10_000);
    // On a 1,000-token budget a chat call (estimate over 4,096) is never made: no 16,035-token surprise.
    const small = await h.client(api.url, 'small', 'admin');
    await setBudget('small', 1000);
    const one = (await small.submit('small', 'hello #chat-small', { agent: 'chat' })).body.id as string;
    const refused = await small.waitStatus(one, ['succeeded', 'failed'], 30_000);
    expect(refused.lastError).toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(fake.requestsFor('#chat-small')).toHaveLength(0);
    expect(await usedToday('small')).toBe(0);
  });
});
