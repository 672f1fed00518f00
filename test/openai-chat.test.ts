import OpenAI from 'openai';
import { beforeAll, expect, it } from 'vitest';
import { builtinChatAgent } from '../src/lib/agents/chat.ts';
import { answer, callTools, reportedUsage, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
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

const weather: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};

it('ends with the calls of client tools; the tool results sent back get the answer', async () => {
  fake.script('#tools', [callTools([{ id: 'call_t1', name: 'get_weather', arguments: { city: 'Oslo' } }]), answer('It is 3 degrees in Oslo.')]);
  const question: OpenAI.Chat.ChatCompletionMessageParam = { role: 'user', content: 'Weather in Oslo? #tools' };
  const first = await client.chat.completions.create({ model: 'chat', tools: [weather], tool_choice: 'auto', messages: [question] });
  expect(first.choices).toEqual([{
    index: 0, finish_reason: 'tool_calls', logprobs: null,
    message: {
      role: 'assistant', content: null, refusal: null,
      tool_calls: [{ id: 'call_t1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
    },
  }]);
  expect(fake.requestsFor('#tools')[0].body.tools).toEqual([weather]);

  // The message goes back as it came, as the SDKs' examples do.
  const second = await client.chat.completions.create({
    model: 'chat', tools: [weather],
    messages: [question, first.choices[0].message, { role: 'tool', tool_call_id: 'call_t1', content: '3 degrees' }],
  });
  expect(second.choices[0]).toMatchObject({ finish_reason: 'stop', message: { role: 'assistant', content: 'It is 3 degrees in Oslo.' } });
  expect(second.choices[0].message.tool_calls).toBeUndefined();
  expect(fake.requestsFor('#tools')[1].messages).toEqual([
    question,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_t1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_t1', content: '3 degrees' },
  ]);
  expect(fake.requestsFor('#tools')).toHaveLength(2);
});

it('streams tool calls as delta.tool_calls, then finish_reason tool_calls, usage and [DONE]', async () => {
  fake.script('#streamtools', [
    callTools([{ id: 'call_s1', name: 'get_weather', arguments: { city: 'Oslo' } }, { id: 'call_s2', name: 'get_weather', arguments: { city: 'Rome' } }]),
    answer('Oslo is cold, Rome is warm.'),
  ]);
  const question: OpenAI.Chat.ChatCompletionMessageParam = { role: 'user', content: 'Oslo and Rome? #streamtools' };
  const stream = await client.chat.completions.create({
    model: 'chat', stream: true, stream_options: { include_usage: true }, tools: [weather], messages: [question],
  });
  const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  const deltas = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
  expect(deltas.filter((d) => d.id).map((d) => [d.index, d.id, d.type, d.function?.name])).toEqual([
    [0, 'call_s1', 'function', 'get_weather'], [1, 'call_s2', 'function', 'get_weather'],
  ]);
  const args = (index: number) => deltas.filter((d) => d.index === index).map((d) => d.function?.arguments ?? '').join('');
  expect([args(0), args(1)]).toEqual(['{"city":"Oslo"}', '{"city":"Rome"}']);
  expect(chunks.at(-2)!.choices[0].finish_reason).toBe('tool_calls');
  expect(chunks.at(-1)!.choices).toEqual([]);
  expect(chunks.at(-1)!.usage?.completion_tokens).toBeGreaterThan(0);

  // The SDK's stream helper adds the chunks up to the message, whose calls are answered in a streamed request.
  fake.script('#streamtools2', [callTools([{ id: 'call_s3', name: 'get_weather', arguments: { city: 'Bern' } }])]);
  const helper = client.chat.completions.stream({ model: 'chat', tools: [weather], messages: [{ role: 'user', content: 'Again #streamtools2' }] });
  const added = await helper.finalChatCompletion().catch((e: unknown) => e);
  expect(added).toMatchObject({ choices: [{ finish_reason: 'tool_calls', message: { tool_calls: [{ id: 'call_s3', function: { name: 'get_weather', arguments: '{"city":"Bern"}' } }] } }] });

  const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []).filter((d) => d.id);
  const answerStream = await client.chat.completions.create({
    model: 'chat', stream: true, tools: [weather],
    messages: [
      question,
      { role: 'assistant', content: null, tool_calls: calls.map((d) => ({ id: d.id!, type: 'function' as const, function: { name: 'get_weather', arguments: args(d.index) } })) },
      { role: 'tool', tool_call_id: 'call_s1', content: '3 degrees' },
      { role: 'tool', tool_call_id: 'call_s2', content: '24 degrees' },
    ],
  });
  let text = '';
  let finish: string | null = null;
  for await (const c of answerStream) {
    text += c.choices[0]?.delta.content ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  expect([text, finish]).toEqual(['Oslo is cold, Rome is warm.', 'stop']);
});

it('sends earlier tool turns and several rounds after the question to the model in order', async () => {
  fake.script('#rounds', [answer('Done.')]);
  const call = (id: string, city: string) => ({ id, type: 'function' as const, function: { name: 'get_weather', arguments: JSON.stringify({ city }) } });
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Oslo?' },
    { role: 'assistant', content: null, tool_calls: [call('call_r1', 'Oslo')] },
    { role: 'tool', tool_call_id: 'call_r1', content: 'cold' },
    { role: 'assistant', content: 'Cold.' },
    { role: 'user', content: 'Rome, then Bern? #rounds' },
    { role: 'assistant', content: 'Looking.', tool_calls: [call('call_r2', 'Rome')] },
    { role: 'tool', tool_call_id: 'call_r2', content: 'warm' },
    { role: 'assistant', content: null, tool_calls: [call('call_r3', 'Bern')] },
    { role: 'tool', tool_call_id: 'call_r3', content: 'mild' },
  ];
  const done = await client.chat.completions.create({ model: 'chat', tools: [weather], messages });
  expect(done.choices[0].message.content).toBe('Done.');
  expect(fake.requestsFor('#rounds')[0].messages).toEqual(messages);
});

it('calls the model without the tools when tool_choice is none', async () => {
  fake.script('#none', [answer('No tools.')]);
  const done = await client.chat.completions.create({ model: 'chat', tools: [weather], tool_choice: 'none', messages: [{ role: 'user', content: 'x #none' }] });
  expect(done.choices[0].message.content).toBe('No tools.');
  expect(fake.requestsFor('#none')[0].body.tools).toBeUndefined();
});

it('refuses tool turns that do not pair up, naming the message', async () => {
  const call = { id: 'call_x', type: 'function' as const, function: { name: 'get_weather', arguments: '{}' } };
  const user: OpenAI.Chat.ChatCompletionMessageParam = { role: 'user', content: 'x' };
  const refused = (messages: OpenAI.Chat.ChatCompletionMessageParam[], extra: object = {}) =>
    client.chat.completions.create({ model: 'chat', tools: [weather], messages, ...extra }).catch((e: unknown) => e);
  const unknownId = await refused([user, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_y', content: 'r' }]);
  expect(unknownId).toBeInstanceOf(OpenAI.BadRequestError);
  expect(unknownId).toMatchObject({ status: 400, param: 'messages[2].tool_call_id', code: 'validation_failed' });
  expect(await refused([user, { role: 'tool', tool_call_id: 'call_x', content: 'r' }])).toMatchObject({ param: 'messages[1].tool_call_id' });
  const twice = await refused([
    user, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_x', content: 'r' }, { role: 'tool', tool_call_id: 'call_x', content: 'r' },
  ]);
  expect(twice).toMatchObject({ param: 'messages[3].tool_call_id' });
  const unanswered = await refused([user, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'user', content: 'y' }]);
  expect(unanswered).toMatchObject({ param: 'messages[1].tool_calls' });
  const reused = await refused([
    user, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_x', content: 'r' },
    { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_x', content: 'r' },
  ]);
  expect(reused).toMatchObject({ param: 'messages[3].tool_calls[0].id' });
  expect(await refused([user], { tool_choice: 'required' })).toMatchObject({ status: 400, param: 'tool_choice', code: 'unsupported_parameter' });
  const custom = await client.chat.completions.create({
    model: 'chat', messages: [user], tools: [{ type: 'custom', custom: { name: 'grammar' } }],
  }).catch((e: unknown) => e);
  expect(custom).toMatchObject({ status: 400, param: 'tools[0].type', code: 'unsupported_parameter' });
  expect(fake.requests.filter((r) => r.messages.some((m) => m.content === 'x' || m.content === 'y'))).toEqual([]);
});

it("runs the SDK's own tool loop (runTools) to the final answer", async () => {
  fake.script('#runner', [callTools([{ id: 'call_u1', name: 'get_weather', arguments: { city: 'Oslo' } }]), answer('It is 3 degrees.')]);
  const ran: unknown[] = [];
  const runner = client.chat.completions.runTools({
    model: 'chat', messages: [{ role: 'user', content: 'Weather in Oslo? #runner' }],
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } },
        parse: JSON.parse,
        function: (args: unknown) => {
          ran.push(args);
          return '3 degrees';
        },
      },
    }],
  });
  expect(await runner.finalContent()).toBe('It is 3 degrees.');
  expect(ran).toEqual([{ city: 'Oslo' }]);
  expect(fake.requestsFor('#runner').at(-1)!.messages.at(-1)).toEqual({ role: 'tool', tool_call_id: 'call_u1', content: '3 degrees' });
});
