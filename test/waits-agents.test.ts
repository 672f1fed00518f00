import { createOpenAI } from '@ai-sdk/openai';
import { stepCountIs, streamText, tool } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createChatAgent, defineTool } from '../src/lib/agents/chat.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { durableModel, durableTools } from '../src/lib/sdk/ai.ts';
import { answer, callTools, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from './helpers/fake-openai.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Approval-gated tools in the two agent helpers, against the fake OpenAI-compatible server
 * on a real Redis and a real worker: createChatAgent's tool loop and the AI SDK's own loop
 * through baton/ai. The run waits for the approval holding no worker; an approved call runs
 * once; a declined one never runs and the model hears why.
 */
let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;

const refunds: string[] = [];

const refund = defineTool({
  description: 'Refund an order.',
  parameters: z.object({ order: z.string(), amount: z.number() }),
  approval: true,
  execute({ order, amount }) {
    refunds.push(order);
    return { refunded: order, amount };
  },
});

const aiAgent = (baseURL: string) => defineAgent({
  name: 'ai-refunds',
  async run(ctx) {
    const model = durableModel(ctx, createOpenAI({ baseURL, apiKey: 'test-key' }).chat('fake-model'));
    const tools = durableTools(ctx, {
      refund: tool({
        description: 'Refund an order.',
        inputSchema: z.object({ order: z.string(), amount: z.number() }),
        // The AI SDK's own flag: Baton turns it into a durable wait.
        needsApproval: async ({ amount }) => amount > 10,
        execute: async ({ order, amount }) => {
          refunds.push(order);
          return { refunded: order, amount };
        },
      }),
    });
    const result = streamText({ model, tools, stopWhen: stepCountIs(4), messages: [{ role: 'user', content: ctx.input.content }], abortSignal: ctx.signal });
    return { answer: (await result.steps).map((s) => s.text).join('') };
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
  await h.startWorker({
    agents: [createChatAgent({ name: 'support', model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key', tools: { refund } }), aiAgent(fake.baseURL)],
  });
});

const toolContents = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'tool').map((m) => m.content);

async function decide(runId: string, value: unknown) {
  const waiting = await acme.waitStatus(runId, ['waiting', 'failed'], 30_000);
  expect(waiting.status).toBe('waiting');
  expect(waiting.waits).toHaveLength(1);
  const [w] = waiting.waits;
  expect(w).toMatchObject({ kind: 'approval', name: 'refund' });
  const res = await acme.post(`/runs/${runId}/waits/${encodeURIComponent(w.key)}`, { value });
  expect(res.status).toBe(200);
  return w;
}

describe('createChatAgent', () => {
  it('an approval-gated tool declined: it never runs, the model gets the decline with the reason and answers', async () => {
    fake.script('#declined', [
      callTools([{ id: 'c-refund', name: 'refund', arguments: { order: 'A-17', amount: 40 } }]),
      answer('I could not refund A-17: the refund was declined.'),
    ]);
    const run = (await acme.submit('chat-1', 'Refund A-17 please #declined', { agent: 'support' })).body;
    const w = await decide(run.id, { approved: false, reason: 'over the limit for this customer' });
    expect(w).toMatchObject({ key: 'wait:refund:1', prompt: { order: 'A-17', amount: 40 } });
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    expect(done.result).toMatchObject({ answer: 'I could not refund A-17: the refund was declined.', finishReason: 'stop', toolCallsSeen: 0 });
    // Two model calls, each counted once: the one before the wait was replayed from the memo after it.
    expect(done.result.usage.modelCalls).toBe(2);
    expect(refunds).not.toContain('A-17');
    const requests = fake.requestsFor('#declined');
    // The model was asked once before the wait and once after it (the first answer came from the memo).
    expect(requests).toHaveLength(2);
    expect(toolContents(requests[1]).map((c) => JSON.parse(c))).toEqual([
      { error: 'the user declined this call of refund; it did not run', reason: 'over the limit for this customer' },
    ]);
  });

  it('an approval-gated tool approved: it runs once and the model gets its result', async () => {
    fake.script('#approved', [
      callTools([{ id: 'c-ok', name: 'refund', arguments: { order: 'B-2', amount: 5 } }]),
      answer('Refunded B-2.'),
    ]);
    const run = (await acme.submit('chat-2', 'Refund B-2 #approved', { agent: 'support' })).body;
    await decide(run.id, { approved: true });
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    expect(done.result.answer).toBe('Refunded B-2.');
    expect(refunds.filter((o) => o === 'B-2')).toHaveLength(1);
    expect(toolContents(fake.requestsFor('#approved')[1]).map((c) => JSON.parse(c))).toEqual([{ refunded: 'B-2', amount: 5 }]);
  });
});

describe('baton/ai durableTools', () => {
  it('needsApproval becomes a durable wait: declined, the model hears why; approved, the tool runs once; below the threshold, no wait', async () => {
    fake.script('#ai-declined', [
      callTools([{ id: 'a-1', name: 'refund', arguments: { order: 'C-1', amount: 50 } }]),
      answer('Declined, sorry.'),
    ]);
    const declined = (await acme.submit('ai-1', 'Refund C-1 #ai-declined', { agent: 'ai-refunds' })).body;
    await decide(declined.id, { approved: false, reason: 'needs a manager' });
    expect((await acme.waitStatus(declined.id, ['succeeded', 'failed'], 30_000)).result.answer).toBe('Declined, sorry.');
    expect(refunds).not.toContain('C-1');
    expect(JSON.stringify(fake.requestsFor('#ai-declined')[1].messages)).toContain('the call of refund was declined: needs a manager');

    fake.script('#ai-approved', [
      callTools([{ id: 'a-2', name: 'refund', arguments: { order: 'C-2', amount: 50 } }]),
      answer('Done.'),
    ]);
    const approved = (await acme.submit('ai-2', 'Refund C-2 #ai-approved', { agent: 'ai-refunds' })).body;
    await decide(approved.id, { approved: true });
    expect((await acme.waitStatus(approved.id, ['succeeded', 'failed'], 30_000)).result.answer).toBe('Done.');
    expect(refunds.filter((o) => o === 'C-2')).toHaveLength(1);

    fake.script('#ai-small', [callTools([{ id: 'a-3', name: 'refund', arguments: { order: 'C-3', amount: 2 } }]), answer('Small one done.')]);
    const small = (await acme.submit('ai-3', 'Refund C-3 #ai-small', { agent: 'ai-refunds' })).body;
    const done = await acme.waitStatus(small.id, ['succeeded', 'failed', 'waiting'], 30_000);
    expect(done.status).toBe('succeeded');
    expect(refunds.filter((o) => o === 'C-3')).toHaveLength(1);
  });
});
