import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answer, callTools, fakeEmbedding, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';

/**
 * The fake OpenAI-compatible server speaks the wire format the real clients parse: checked
 * here with the `openai` package itself, so a test that relies on the fake relies on the
 * format, not on the fake's own reading of it.
 */
let fake: FakeOpenAI;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  client = new OpenAI({ baseURL: fake.baseURL, apiKey: 'k', maxRetries: 0 });
});
afterAll(() => fake.close());

describe('fake OpenAI server', () => {
  it('streams several tool calls with their arguments in pieces, then usage when asked', async () => {
    fake.script('#tools', [callTools([
      { name: 'weather', arguments: { city: 'Paris' } },
      { id: 'fixed', name: 'weather', arguments: { city: 'Berlin' }, chunks: 5 },
    ])]);
    const stream = client.chat.completions.stream({
      model: 'm', messages: [{ role: 'user', content: 'go #tools' }], stream_options: { include_usage: true },
    });
    const pieces: string[] = [];
    stream.on('tool_calls.function.arguments.delta', (e) => pieces.push(e.arguments_delta));
    const done = await stream.finalChatCompletion();
    const calls = done.choices[0].message.tool_calls!.map((c) => c.type === 'function' && [c.id, c.function.name, JSON.parse(c.function.arguments)]);
    expect(calls).toEqual([[expect.stringMatching(/^call_\d+$/), 'weather', { city: 'Paris' }], ['fixed', 'weather', { city: 'Berlin' }]]);
    expect(done.choices[0].finish_reason).toBe('tool_calls');
    expect(pieces.length).toBeGreaterThanOrEqual(6);
    // One request message: 10 prompt tokens; two calls: 20 completion tokens.
    expect(done.usage).toEqual({ prompt_tokens: 10, completion_tokens: 20, total_tokens: 30 });
    expect(fake.requestsFor('#tools')[0].usage).toEqual(done.usage);
  });

  it('reports no usage on a stream that did not ask for it', async () => {
    fake.script('#quiet', [answer('Just text.')]);
    const chunks = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#quiet' }], stream: true });
    let text = '';
    for await (const c of chunks) {
      text += c.choices[0]?.delta?.content ?? '';
      expect(c.usage ?? undefined).toBeUndefined();
    }
    expect(text).toBe('Just text.');
    expect(fake.requestsFor('#quiet')[0].usage).toBeUndefined();
  });

  it('holds a stream at its gate until the test opens it, and records what it sent and how it ended', async () => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => { open = resolve; });
    fake.script('#gate', [answer('one two three four', { gate: { after: 2, open: opened } })]);
    const chunks = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#gate' }], stream: true });
    const read = chunks[Symbol.asyncIterator]();
    let text = '';
    while (text !== 'one two') text += (await read.next()).value?.choices[0]?.delta?.content ?? '';
    const [held] = fake.requestsFor('#gate');
    expect([held.tokensSent, held.ended]).toEqual([2, undefined]);
    open();
    for (let r = await read.next(); !r.done; r = await read.next()) text += r.value.choices[0]?.delta?.content ?? '';
    expect(text).toBe('one two three four');
    expect(held).toMatchObject({ tokensSent: 4, ended: 'answered' });

    // A client that hangs up while the stream is held gets nothing more.
    let openLate!: () => void;
    const late = new Promise<void>((resolve) => { openLate = resolve; });
    fake.script('#gate-gone', [answer('one two three four', { gate: { after: 1, open: late } })]);
    const abort = new AbortController();
    const gone = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#gate-gone' }], stream: true }, { signal: abort.signal });
    await gone[Symbol.asyncIterator]().next();
    const [cut] = fake.requestsFor('#gate-gone');
    await expect.poll(() => cut.tokensSent).toBe(1);
    abort.abort();
    await expect.poll(() => cut.ended).toBe('client-gone');
    openLate();
    // The handler goes on in microtasks once the gate opens: let them all run.
    await new Promise((resolve) => setImmediate(resolve));
    expect(cut.tokensSent).toBe(1);
  });

  it('answers a request without stream as one JSON body, tool calls and usage included', async () => {
    fake.script('#json', [
      answer('Let me look.', { toolCalls: [{ id: 'c1', name: 'lookup', arguments: '{"q": "x"' }], usage: { prompt_tokens: 7, completion_tokens: 3 } }),
      answer('Found it.'),
    ]);
    const first = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#json' }] });
    expect(first.choices[0].message).toMatchObject({
      content: 'Let me look.', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{"q": "x"' } }],
    });
    expect(first.usage).toEqual({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    const second = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#json' }] });
    expect([second.choices[0].message.content, second.choices[0].finish_reason]).toEqual(['Found it.', 'stop']);
    expect(fake.requestsFor('#json').map((r) => r.stream)).toEqual([false, false]);
  });

  it('overload(): 429 with Retry-After for every request until it has passed, then answers again; arrivals are timed', async () => {
    fake.script('#busy', [answer('fine')]);
    const ask = () => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'go #busy' }] });
    fake.overload(1);
    for (let i = 0; i < 2; i++) {
      const err = await ask().then(() => undefined, (e: { status: number; headers: Headers }) => e);
      expect([err?.status, err?.headers.get('retry-after')]).toEqual([429, '1']);
    }
    await new Promise((r) => setTimeout(r, 1_050));
    expect((await ask()).choices[0].message.content).toBe('fine');
    const sent = fake.requestsFor('#busy');
    expect(sent.map((r) => r.reply.kind)).toEqual(['status', 'status', 'stream']);
    // Stamped in arrival order; the answer came only once the fake's own 1 s period had passed.
    const stamps = sent.map((r) => r.at);
    expect(stamps).toEqual([...stamps].sort((x, y) => x - y));
    expect(sent[2].at - sent[0].at).toBeGreaterThanOrEqual(1_000);
  });

  it('embeds deterministically, as floats or base64, with pinned vectors winning', async () => {
    fake.embedding('pinned', [1, 0, 0]);
    // The `openai` package asks for base64 unless told otherwise and decodes it itself.
    const b64 = await client.embeddings.create({ model: 'e', input: ['alpha', 'pinned'] });
    const floats = await client.embeddings.create({ model: 'e', input: 'alpha', encoding_format: 'float', dimensions: 4 });
    expect(fake.embeddingRequests.map((r) => [r.encoding, r.input, r.dimensions])).toEqual([
      ['base64', ['alpha', 'pinned'], 8], ['float', ['alpha'], 4],
    ]);
    const alpha = fakeEmbedding('alpha');
    expect(b64.data[0].embedding.map((x) => x.toFixed(5))).toEqual(alpha.map((x) => x.toFixed(5)));
    expect(b64.data[1].embedding).toEqual([1, 0, 0]);
    expect(floats.data[0].embedding).toEqual(fakeEmbedding('alpha', 4));
    expect(Math.hypot(...alpha)).toBeCloseTo(1, 10);
    expect(fakeEmbedding('beta')).not.toEqual(alpha);
  });

  it('a marker scripted again answers with its new replies', async () => {
    const ask = async () => (await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'go #again' }] })).choices[0].message.content;
    fake.script('#again', [answer('first script')]);
    expect(await ask()).toBe('first script');
    fake.script('#again', [answer('second script')]);
    expect(await ask()).toBe('second script');
  });
});
