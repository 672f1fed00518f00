import { beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import type { z } from 'zod';
import type { runUsageResponse } from '../src/api/response-schemas.ts';
import type { RunUsage } from '../src/lib/contract/index.ts';
import { createChatAgent } from '../src/lib/agents/chat.ts';
import { ConfigError, loadConfig } from '../src/lib/config/index.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { RetryAfterError } from '../src/lib/sdk/errors.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/**
 * A run's model usage by model, and its cost by MODEL_PRICES (GET …/runs/{runId}/usage):
 * real workers and Redis, model calls from the fake model server and from agents that
 * record them by hand.
 */
const PRICES = {
  'priced-model': { inputPerMTokens: 0.15, outputPerMTokens: 0.6 },
  'cheap-model': { inputPerMTokens: 1, outputPerMTokens: 2 },
};

/** Two models in one run, then a retry: the second attempt takes both calls from the memo. */
const twoModels = defineAgent({
  name: 'two-models',
  async run(ctx) {
    await ctx.infer('big', (call) => {
      call.recordUsage({ model: 'priced-model', inputTokens: 1_000_000, outputTokens: 500_000 });
      return 'big';
    });
    await ctx.infer('small', (call) => {
      call.recordUsage({ model: 'cheap-model', inputTokens: 300, outputTokens: 100 });
      call.recordUsage({ model: 'cheap-model', inputTokens: 1, outputTokens: 1 });
      return 'small';
    });
    if (ctx.attempt === 1) throw new RetryAfterError('once more', 20);
    return 'done';
  },
});

/** A model the price table does not know, beside one it does. */
const unknownModel = defineAgent({
  name: 'unknown-model',
  async run(ctx) {
    await ctx.infer('a', (call) => {
      call.recordUsage({ model: 'priced-model', inputTokens: 10, outputTokens: 10 });
      call.recordUsage({ model: 'mystery-model', inputTokens: 5, outputTokens: 5 });
      return 'a';
    });
    return 'done';
  },
});

let h: Harness;
let fake: FakeOpenAI;
let priced: ScopeClient;
let plain: ScopeClient;
let plainUrl: string;

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const pricedUrl = (await h.startApi({ MODEL_PRICES: JSON.stringify(PRICES) })).url;
  plainUrl = (await h.startApi()).url;
  await h.startWorker({
    agents: [createChatAgent({ name: 'writer', model: 'priced-model', baseURL: fake.baseURL, apiKey: 'test-key' }), twoModels, unknownModel],
  });
  priced = await h.client(pricedUrl, 'acme', 'client');
  plain = await h.client(plainUrl, 'acme', 'client');
});

async function finished(agent: string, content: string): Promise<string> {
  const sub = await priced.submit(`ru-${agent}`, content, { agent });
  expect(sub.status).toBe(202);
  const run = await priced.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
  expect(run.status).toBe('succeeded');
  return run.id;
}

describe("a run's usage and cost", () => {
  it('answers in the shape of the contract (checked by the type check)', () => {
    expectTypeOf<z.infer<typeof runUsageResponse>>().toEqualTypeOf<RunUsage>();
  });

  it('prices a model call of the chat agent by the table', async () => {
    fake.script('#ru-chat', [answer('Done.', { usage: { prompt_tokens: 1200, completion_tokens: 300 } })]);
    const id = await finished('writer', 'Write #ru-chat');
    const res = await priced.get(`/runs/${id}/usage`);
    expect(res.status).toBe(200);
    // 1200 × 0.15 / 1e6 + 300 × 0.6 / 1e6 = 0.00018 + 0.00018
    expect(res.body).toEqual({
      runId: id,
      total: { inputTokens: 1200, outputTokens: 300, totalTokens: 1500, modelCalls: 1 },
      models: [{ model: 'priced-model', inputTokens: 1200, outputTokens: 300, totalTokens: 1500, modelCalls: 1, costUsd: 0.00036 }],
      costUsd: 0.00036,
    });
    // The totals are the run's own, as its result says.
    expect((await priced.get(`/runs/${id}`)).body.result.usage).toEqual(res.body.total);
  });

  it('sums two models, each call once across a retry', async () => {
    const id = await finished('two-models', 'go');
    expect((await priced.get(`/runs/${id}`)).body.attempt).toBe(2);
    const res = await priced.get(`/runs/${id}/usage`);
    expect(res.body).toEqual({
      runId: id,
      total: { inputTokens: 1_000_301, outputTokens: 500_101, totalTokens: 1_500_402, modelCalls: 3 },
      // Sorted by model id; cheap-model: 301 × 1 / 1e6 + 101 × 2 / 1e6.
      models: [
        { model: 'cheap-model', inputTokens: 301, outputTokens: 101, totalTokens: 402, modelCalls: 2, costUsd: 0.000503 },
        { model: 'priced-model', inputTokens: 1_000_000, outputTokens: 500_000, totalTokens: 1_500_000, modelCalls: 1, costUsd: 0.45 },
      ],
      costUsd: 0.450503,
    });
  });

  it('gives no cost when a model has no price, and names it', async () => {
    const id = await finished('unknown-model', 'go');
    const res = await priced.get(`/runs/${id}/usage`);
    expect(res.body).toEqual({
      runId: id,
      total: { inputTokens: 15, outputTokens: 15, totalTokens: 30, modelCalls: 2 },
      models: [
        { model: 'mystery-model', inputTokens: 5, outputTokens: 5, totalTokens: 10, modelCalls: 1 },
        { model: 'priced-model', inputTokens: 10, outputTokens: 10, totalTokens: 20, modelCalls: 1, costUsd: 0.0000075 },
      ],
      unpriced: ['mystery-model'],
    });
  });

  it('gives tokens and no cost where no price table is set', async () => {
    const id = await finished('two-models', 'again');
    const res = await plain.get(`/runs/${id}/usage`);
    expect(res.status).toBe(200);
    expect(res.body.total).toEqual({ inputTokens: 1_000_301, outputTokens: 500_101, totalTokens: 1_500_402, modelCalls: 3 });
    expect(res.body.models.map((m: { model: string }) => m.model)).toEqual(['cheap-model', 'priced-model']);
    for (const m of res.body.models) expect(m).not.toHaveProperty('costUsd');
    expect(res.body).not.toHaveProperty('costUsd');
    expect(res.body).not.toHaveProperty('unpriced');
  });

  it('a run without model calls costs nothing; a queued one has no usage yet', async () => {
    const id = await finished('echo', 'hello');
    expect((await priced.get(`/runs/${id}/usage`)).body).toEqual({
      runId: id, total: { inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: 0 }, models: [], costUsd: 0,
    });
    const later = (await priced.submit('ru-later', 'later', { delayMs: 600_000 })).body;
    expect((await plain.get(`/runs/${later.id}/usage`)).body).toEqual({
      runId: later.id, total: { inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: 0 }, models: [],
    });
    await priced.post(`/runs/${later.id}/cancel`, {});
  });

  it("answers 404 for a run that is not there or another scope's, 401 without a key", async () => {
    const id = await finished('echo', 'mine');
    const missing = await priced.get('/runs/r-no-such-run/usage');
    expect([missing.status, missing.body.error.code]).toEqual([404, 'RUN_NOT_FOUND']);
    const base = plainUrl;
    const asGlobex = await call(base, 'GET', `/v1/scopes/globex/runs/${id}/usage`, undefined, { authorization: `Bearer ${await h.key('globex', 'client')}` });
    expect([asGlobex.status, asGlobex.body.error.code]).toEqual([404, 'RUN_NOT_FOUND']);
    const wrongScope = await call(base, 'GET', `/v1/scopes/acme/runs/${id}/usage`, undefined, { authorization: `Bearer ${await h.key('globex', 'admin')}` });
    expect(wrongScope.status).toBe(404);
    expect((await call(base, 'GET', `/v1/scopes/acme/runs/${id}/usage`)).status).toBe(401);
    const bad = await priced.get('/runs/not%20an%20id/usage');
    expect([bad.status, bad.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);
  });
});

describe('MODEL_PRICES', () => {
  const refused = (value: string) => {
    try {
      loadConfig({ MODEL_PRICES: value });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message.split('\n').slice(1);
    }
    throw new Error(`MODEL_PRICES=${value} was accepted`);
  };

  it('takes a JSON table of model ids to prices per million tokens', () => {
    expect(loadConfig({ MODEL_PRICES: JSON.stringify(PRICES) }).MODEL_PRICES).toEqual(PRICES);
    expect(loadConfig({}).MODEL_PRICES).toBeUndefined();
  });

  it('refuses anything else with a line that says what is wrong', () => {
    expect(refused('{gpt: 1}')).toEqual(['  MODEL_PRICES: must be JSON: {"<model>": {"inputPerMTokens": <USD>, "outputPerMTokens": <USD>}, …}']);
    expect(refused('[1]')).toEqual(['  MODEL_PRICES: must be a JSON object of model ids to prices']);
    expect(refused('{"m": {"inputPerMTokens": -1, "outputPerMTokens": 1}}')).toEqual(['  MODEL_PRICES.m.inputPerMTokens: Too small: expected number to be >=0']);
    expect(refused('{"m": {"inputPerMTokens": "1", "outputPerMTokens": 1}}')).toEqual(['  MODEL_PRICES.m.inputPerMTokens: Invalid input: expected number, received string']);
    expect(refused('{"m": {"inputPerMTokens": 1}}')).toEqual(['  MODEL_PRICES.m.outputPerMTokens: Invalid input: expected number, received undefined']);
    expect(refused('{"m": {"inputPerMTokens": 1, "outputPerMTokens": 1, "perCall": 1}}')).toEqual(['  MODEL_PRICES.m: Unrecognized key: "perCall"']);
    expect(refused('{"": {"inputPerMTokens": 1, "outputPerMTokens": 1}}')).toEqual(['  MODEL_PRICES.: model ids are 1 to 200 characters']);
  });
});
