import OpenAI from 'openai';
import { beforeAll, expect, it } from 'vitest';
import { builtinChatAgent } from '../src/lib/agents/chat.ts';
import { answer, reportedUsage, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, type Harness } from './helpers/harness.ts';

/** The OpenAI-compatible Chat Completions (docs/openai-api.md) through the official `openai` package. */
let h: Harness;
let fake: FakeOpenAI;
let client: OpenAI;

beforeAll(async () => {
  h = await useHarness({ OPENAI_COMPAT_MODELS: 'gpt-4o-mini=chat' });
  fake = await startFakeOpenAI();
  const url = (await h.startApi()).url;
  await h.startWorker({
    agents: [builtinChatAgent({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'k', OPENAI_MODEL: 'fake-model', CHAT_MAX_TOKENS: 4096 })],
  });
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: await h.key('acme', 'client'), maxRetries: 0 });
});

it('answers a plain chat completion, the earlier messages as its conversation', async () => {
  fake.script('#plain', [answer('You are Ada.')]);
  const done = await client.chat.completions.create({
    model: 'gpt-4o-mini', max_tokens: 50,
    messages: [
      { role: 'system', content: 'Be brief.' }, { role: 'user', content: 'I am Ada' }, { role: 'assistant', content: 'Hello, Ada.' },
      { role: 'user', content: 'Who am I? #plain' },
    ],
  });
  expect(done.object).toBe('chat.completion');
  expect(done.model).toBe('gpt-4o-mini');
  expect(done.choices).toEqual([{ index: 0, message: { role: 'assistant', content: 'You are Ada.', refusal: null }, finish_reason: 'stop', logprobs: null }]);
  const sent = fake.requestsFor('#plain')[0];
  expect(sent.messages).toEqual([
    { role: 'system', content: 'Be brief.' }, { role: 'user', content: 'I am Ada' }, { role: 'assistant', content: 'Hello, Ada.' },
    { role: 'user', content: 'Who am I? #plain' },
  ]);
  expect(sent.body.max_completion_tokens).toBe(50);
  const usage = reportedUsage(fake.requestsFor('#plain'));
  expect(done.usage).toEqual({ prompt_tokens: usage.inputTokens, completion_tokens: usage.outputTokens, total_tokens: usage.totalTokens });
});

it('streams chunks, then usage (include_usage) and [DONE]', async () => {
  fake.script('#stream', [answer('one two three')]);
  const stream = await client.chat.completions.create({
    model: 'chat', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'count #stream' }],
  });
  const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
  expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('one two three');
  expect(chunks.at(-2)!.choices[0].finish_reason).toBe('stop');
  expect(chunks.at(-1)!.choices).toEqual([]);
  expect(chunks.at(-1)!.usage?.completion_tokens).toBeGreaterThan(0);
  expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
});

it("refuses what it does not support by name, with the SDK's own errors", async () => {
  const refused = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'x' }], temperature: 0.3 }).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
  expect(refused).toMatchObject({ param: 'temperature', code: 'unsupported_parameter' });
  const last = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'assistant', content: 'x' }] }).catch((e: unknown) => e);
  expect(last).toMatchObject({ status: 400, param: 'messages[0].role' });
  const model = await client.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
  expect(model).toBeInstanceOf(OpenAI.NotFoundError);
  // Defaults change nothing, so they are accepted (clients such as LangChain send them).
  fake.script('#defaults', [answer('fine')]);
  const ok = await client.chat.completions.create({ model: 'chat', n: 1, top_p: 1, messages: [{ role: 'user', content: 'x #defaults' }] });
  expect(ok.choices[0].message.content).toBe('fine');
});
