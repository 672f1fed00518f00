import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { builtinChatAgent } from '../src/lib/agents/chat.ts';
import { answer, callTools, reportedUsage, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

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

/** Each item's text and whether the deltas sent for it add up to exactly that text. */
function itemsOf(events: OpenAI.Responses.ResponseStreamEvent[]) {
  const deltas = new Map<string, string>();
  const done = new Map<string, { text: string; status: string }>();
  for (const e of events) {
    if (e.type === 'response.output_text.delta') deltas.set(e.item_id, (deltas.get(e.item_id) ?? '') + e.delta);
    if (e.type === 'response.output_item.done' && e.item.type === 'message') {
      const part = e.item.content[0];
      done.set(e.item.id, { text: part?.type === 'output_text' ? part.text : '', status: e.item.status });
    }
  }
  return [...done].map(([id, item]) => ({ id, ...item, deltas: deltas.get(id) }));
}

describe('responses', () => {
  it('answers synchronously, and a conversation goes on with previous_response_id', async () => {
    fake.script('#one', [answer('Hello, Ada.')]);
    const one = await client.responses.create({
      model: 'chat', input: 'I am Ada #one', instructions: 'Be brief.', metadata: { ticket: 't-1' }, max_output_tokens: 64,
    });
    expect(one.status).toBe('completed');
    expect(one.output_text).toBe('Hello, Ada.');
    expect(one.metadata).toEqual({ ticket: 't-1' });
    expect(one.usage?.output_tokens).toBeGreaterThan(0);
    expect(one.max_output_tokens).toBe(64);
    expect(fake.requestsFor('#one')[0].body.max_completion_tokens).toBe(64);
    expect(one.usage).toEqual({
      input_tokens: reportedUsage(fake.requestsFor('#one')).inputTokens, input_tokens_details: { cached_tokens: 0 },
      output_tokens: reportedUsage(fake.requestsFor('#one')).outputTokens, output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: reportedUsage(fake.requestsFor('#one')).totalTokens,
    });
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

  it('a background stream dropped after a dozen events resumes with starting_after: contiguous, deltas adding up', async () => {
    fake.script('#bg', [answer('a b c d e f g h i j k l m n o p q r s t u v w x y z', { delayMs: 20 })]);
    const first = await client.responses.create({ model: 'chat', input: 'letters #bg', background: true, stream: true });
    const seen: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of first) {
      seen.push(e);
      if (seen.length === 12) break;
    }
    const id = (seen[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
    expect((seen[0] as OpenAI.Responses.ResponseCreatedEvent).response.background).toBe(true);
    const rest = await client.responses.retrieve(id, { stream: true, starting_after: seen.at(-1)!.sequence_number });
    for await (const e of rest) seen.push(e);
    expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
    expect(seen.at(-1)!.type).toBe('response.completed');
    const items = itemsOf(seen);
    expect(items).toEqual([{ id: expect.any(String), status: 'completed', text: 'a b c d e f g h i j k l m n o p q r s t u v w x y z', deltas: 'a b c d e f g h i j k l m n o p q r s t u v w x y z' }]);
    const final = await client.responses.retrieve(id);
    expect(final.output_text).toBe(items[0].text);
  });

  it('cancels a background response: its stream ends with response.incomplete, status cancelled', async () => {
    // The answer waits after its third word until the cancel was made: running when it lands.
    let open!: () => void;
    const opened = new Promise<void>((resolve) => { open = resolve; });
    fake.script('#cancel', [answer('this answer takes a long while to come out word by word', { gate: { after: 3, open: opened } })]);
    const made = await client.responses.create({ model: 'chat', input: 'slow #cancel', background: true });
    expect(made.status).toBe('queued');
    await waitFor(async () => (await client.responses.retrieve(made.id)).output.length > 0, 20_000, 'the first words');
    const cancelled = await client.responses.cancel(made.id);
    open();
    expect(['cancelled', 'in_progress']).toContain(cancelled.status);
    const after = await waitFor(async () => {
      const r = await client.responses.retrieve(made.id);
      return r.status === 'cancelled' ? r : undefined;
    }, 20_000, 'the cancel');
    expect(after.output[0]).toMatchObject({ type: 'message', status: 'incomplete' });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of await client.responses.retrieve(made.id, { stream: true })) events.push(e);
    expect(events.at(-1)).toMatchObject({ type: 'response.incomplete', response: { status: 'cancelled' } });
    const items = itemsOf(events);
    expect(items[0].deltas).toBe(items[0].text);
  });

  it('lists the input items of a response', async () => {
    const made = await client.responses.create({
      model: 'chat', input: [{ role: 'developer', content: 'Answer in French.' }, { role: 'user', content: [{ type: 'input_text', text: 'hello #items' }] }],
    });
    const page = await client.responses.inputItems.list(made.id);
    expect(page.data.map((i) => (i.type === 'message' ? [i.role, i.content] : i.type))).toEqual([
      ['developer', [{ type: 'input_text', text: 'Answer in French.' }]], ['user', [{ type: 'input_text', text: 'hello #items' }]],
    ]);
    expect(fake.requestsFor('#items')[0].messages[0]).toEqual({ role: 'system', content: 'Answer in French.' });
  });

  it("raises the SDK's own errors: a bad key, an unknown id, a bad body, an unknown model", async () => {
    const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'bk_not-a-key', maxRetries: 0 });
    await expect(bad.responses.create({ model: 'chat', input: 'hi' })).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    await expect(client.responses.retrieve('resp_nothing')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const refused = await client.responses.create({ model: 'chat', input: 'hi', temperature: 0.2 }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect(refused).toMatchObject({ status: 400, param: 'temperature', code: 'unsupported_parameter', type: 'invalid_request_error' });
    const empty = await client.responses.create({ model: 'chat', input: '' }).catch((e: unknown) => e);
    expect(empty).toMatchObject({ status: 400, param: 'input' });
    const model = await client.responses.create({ model: 'gpt-9-unlisted', input: 'hi' }).catch((e: unknown) => e);
    expect(model).toBeInstanceOf(OpenAI.NotFoundError);
    expect(model).toMatchObject({ code: 'model_not_found', param: 'model' });
  });

  it("another tenant's key reads nothing of a response: 404 on every route", async () => {
    const made = await client.responses.create({ model: 'chat', input: 'private #tenant' });
    const other = new OpenAI({ baseURL: `${url}/v1`, apiKey: await h.key('globex', 'admin'), maxRetries: 0 });
    await expect(other.responses.retrieve(made.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.responses.retrieve(made.id, { stream: true })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.responses.cancel(made.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.responses.inputItems.list(made.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.responses.create({ model: 'chat', input: 'x', previous_response_id: made.id })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect((await client.responses.retrieve(made.id)).status).toBe('completed');
  });

  it("a scope past its submit rate gets the SDK's RateLimitError, with Retry-After", async () => {
    // A scope's limits apply as to any run: here an API whose scopes may submit 2 runs, then one an hour.
    const limited = await h.startApi({ SUBMIT_RATE_PER_SEC: '0.0003', SUBMIT_BURST: '2' });
    const c = new OpenAI({ baseURL: `${limited.url}/v1`, apiKey: await h.key('ratelimited', 'client'), maxRetries: 0 });
    const refusals: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      await c.responses.create({ model: 'chat', input: `hi ${i}`, background: true }).catch((e: unknown) => refusals.push(e));
    }
    expect(refusals).toHaveLength(1);
    expect(refusals[0]).toBeInstanceOf(OpenAI.RateLimitError);
    expect(refusals[0]).toMatchObject({ status: 429, code: 'rate_limit_exceeded', type: 'rate_limit_error' });
    expect(Number((refusals[0] as InstanceType<typeof OpenAI.RateLimitError>).headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('a client that drops its stream leaves the run going: the response completes and is stored', async () => {
    fake.script('#dropped', [answer('the run goes on without its reader', { delayMs: 20 })]);
    const stream = await client.responses.create({ model: 'chat', input: 'go on #dropped', stream: true });
    let id = '';
    for await (const e of stream) {
      if (e.type === 'response.created') id = e.response.id;
      if (e.type === 'response.output_text.delta') break;
    }
    const done = await waitFor(async () => {
      const r = await client.responses.retrieve(id);
      return r.status === 'completed' ? r : undefined;
    }, 20_000, 'the dropped response to complete');
    expect(done.output_text).toBe('the run goes on without its reader');
  });

  it('function tools run by the client: the response ends with function_call items, and the outputs continue it', async () => {
    fake.script('#weather', [callTools([{ id: 'call_w1', name: 'get_weather', arguments: { city: 'Oslo' } }]), answer('It is 3 degrees in Oslo.')]);
    const tools: OpenAI.Responses.FunctionTool[] = [{
      type: 'function', name: 'get_weather', description: 'The weather in a city', strict: null,
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    }];
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of await client.responses.create({ model: 'chat', input: 'Weather in Oslo? #weather', tools, stream: true })) events.push(e);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const asked = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
    expect(asked.status).toBe('completed');
    expect(asked.output).toEqual([expect.objectContaining({
      type: 'function_call', call_id: 'call_w1', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed',
    })]);
    expect(asked.tools).toEqual([expect.objectContaining({ type: 'function', name: 'get_weather' })]);
    expect(events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => (e as { delta: string }).delta).join('')).toBe('{"city":"Oslo"}');
    expect(fake.requestsFor('#weather')[0].body.tools).toEqual([{
      type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: tools[0].parameters },
    }]);

    const refused = await client.responses.create({
      model: 'chat', previous_response_id: asked.id, tools, input: [{ type: 'function_call_output', call_id: 'call_other', output: '{}' }],
    }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 400, param: 'input[0].call_id' });

    const answered = await client.responses.create({
      model: 'chat', previous_response_id: asked.id, tools,
      input: [{ type: 'function_call_output', call_id: 'call_w1', output: '{"celsius":3}' }],
    });
    expect(answered.output_text).toBe('It is 3 degrees in Oslo.');
    expect(fake.requestsFor('#weather')[1].messages).toEqual([
      { role: 'user', content: 'Weather in Oslo? #weather' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_w1', content: '{"celsius":3}' },
    ]);
    const items = await client.responses.inputItems.list(answered.id);
    expect(items.data).toEqual([expect.objectContaining({ type: 'function_call_output', call_id: 'call_w1', output: '{"celsius":3}' })]);
  });
});
