import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { builtinChatAgent } from '../src/lib/agents/chat.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, type Harness } from './helpers/harness.ts';

/**
 * The OpenAI-compatible Responses API (docs/openai-api.md) through the official `openai`
 * package, against an API and a worker running the built-in chat agent on a fake provider.
 */
let h: Harness;
let fake: FakeOpenAI;
let url: string;
let client: OpenAI;

beforeAll(async () => {
  h = await useHarness({ OPENAI_COMPAT_MODELS: 'gpt-4o-mini' });
  fake = await startFakeOpenAI();
  url = (await h.startApi()).url;
  await h.startWorker({
    agents: [builtinChatAgent({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'k', OPENAI_MODEL: 'fake-model', CHAT_MAX_TOKENS: 4096 })],
  });
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: await h.key('acme', 'client'), maxRetries: 0 });
});

describe('responses', () => {
  it('answers synchronously, and a conversation goes on with previous_response_id', async () => {
    fake.script('#one', [answer('Hello, Ada.')]);
    const one = await client.responses.create({ model: 'chat', input: 'I am Ada #one', instructions: 'Be brief.', metadata: { ticket: 't-1' } });
    expect(one.status).toBe('completed');
    expect(one.output_text).toBe('Hello, Ada.');
    expect(one.metadata).toEqual({ ticket: 't-1' });
    expect(one.usage?.output_tokens).toBeGreaterThan(0);
    expect(fake.requestsFor('#one')[0].messages).toEqual([
      { role: 'system', content: 'Be brief.' }, { role: 'user', content: 'I am Ada #one' },
    ]);

    fake.script('#two', [answer('You are Ada.')]);
    const two = await client.responses.create({ model: 'gpt-4o-mini', input: [{ role: 'user', content: 'Who am I? #two' }], previous_response_id: one.id });
    expect(two.output_text).toBe('You are Ada.');
    expect(two.model).toBe('gpt-4o-mini');
    expect(two.previous_response_id).toBe(one.id);
    expect(fake.requestsFor('#two')[0].messages).toEqual([
      { role: 'user', content: 'I am Ada #one' }, { role: 'assistant', content: 'Hello, Ada.' }, { role: 'user', content: 'Who am I? #two' },
    ]);
    const again = await client.responses.retrieve(two.id);
    expect(again.output).toEqual(two.output);
  });

  it('streams OpenAI events with contiguous sequence numbers', async () => {
    fake.script('#stream', [answer('one two three four')]);
    const stream = await client.responses.create({ model: 'chat', input: 'count #stream', stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events[0].type).toBe('response.created');
    expect(events.at(-1)!.type).toBe('response.completed');
    const deltas = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : [])).join('');
    expect(deltas).toBe('one two three four');
  });
});
