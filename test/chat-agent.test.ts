import { beforeAll, describe, expect, it } from 'vitest';
import { builtinChatAgent, createChatAgent } from '../src/lib/agents/chat.ts';
import { reportedUsage, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText, type SseEvent } from './helpers/http.ts';

/**
 * The built-in `chat` agent against a small OpenAI-compatible streaming server: tokens
 * streamed, history from the session, provider errors classified for retry.
 */
let h: Harness;
let fake: FakeOpenAI;
let apiUrl: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  apiUrl = (await h.startApi()).url;
  await h.startWorker({
    agents: [builtinChatAgent({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'test-key', OPENAI_MODEL: 'fake-model', CHAT_MAX_TOKENS: h.config.CHAT_MAX_TOKENS })],
  });
  acme = await h.client(apiUrl, 'acme', 'client');
});

async function chat(sessionId: string, content: string, extra: Record<string, unknown> = {}) {
  const sub = await acme.submit(sessionId, content, { agent: 'chat', ...extra });
  expect(sub.status).toBe(202);
  const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'cancelled'], 30_000);
  const sse = await acme.sse(`/runs/${run.id}/events`);
  const msgs = (await acme.get(`/sessions/${sessionId}/messages`)).body.messages as any[];
  return { run, events: sse.events, history: msgs.map((m) => [m.role, m.content, m.incomplete ?? false]) };
}

/** The answer text a client shows: it restarts at every `attempt` event. */
function clientAnswer(events: SseEvent[]): string {
  let text = '';
  for (const e of events) {
    if (e.event === 'attempt') text = '';
    if (e.event === 'token') text += e.data.text;
  }
  return text;
}

const statuses = (events: SseEvent[]) => events.filter((e) => e.event === 'status').map((e) => e.data.status);

describe('chat agent', () => {
  it('streams the answer token by token and sends the session history with the new message', async () => {
    fake.script('#first', [{ kind: 'stream', tokens: ['Hello', ',', ' Ada', '.'] }]);
    fake.script('#second', [{ kind: 'stream', tokens: ['You', ' are', ' Ada', '.'] }]);
    const one = await chat('talk', 'I am Ada #first', { metadata: { system: 'Be brief.' }, memory: { locale: 'en' } });
    expect(one.run.result).toEqual({ answer: 'Hello, Ada.', finishReason: 'stop', toolCallsSeen: 0, usage: reportedUsage(fake.requestsFor('#first')) });
    expect(one.events.filter((e) => e.event === 'token').length).toBeGreaterThanOrEqual(1);
    expect(tokenText(one.events)).toBe('Hello, Ada.');

    const two = await chat('talk', 'Who am I? #second');
    expect(two.run.result.answer).toBe('You are Ada.');
    const sent = fake.requestsFor('#second')[0];
    expect(sent.model).toBe('fake-model');
    expect(sent.stream).toBe(true);
    expect(sent.messages).toEqual([
      { role: 'user', content: 'I am Ada #first' }, { role: 'assistant', content: 'Hello, Ada.' },
      { role: 'user', content: 'Who am I? #second' },
    ]);
    // The system prompt and the caller memory reach the model as context of their own turn only.
    expect(fake.requestsFor('#first')[0].messages.map((m) => m.role)).toEqual(['system', 'system', 'user']);
    expect(fake.requestsFor('#first')[0].messages[1].content).toContain('"locale":"en"');
    expect(two.history).toEqual([
      ['user', 'I am Ada #first', false], ['assistant', 'Hello, Ada.', false],
      ['user', 'Who am I? #second', false], ['assistant', 'You are Ada.', false],
    ]);
  });

  it('a 429 with Retry-After, then success: one answer, the retry visible on the run and its stream', async () => {
    fake.script('#rate', [
      { kind: 'status', status: 429, retryAfter: '1' },
      { kind: 'stream', tokens: ['after', ' the', ' wait'] },
    ]);
    const { run, events, history } = await chat('rate', 'hi #rate', { maxAttempts: 3 });
    expect(run.status).toBe('succeeded');
    expect(run.attempt).toBe(2);
    expect(run.result.answer).toBe('after the wait');
    expect(run.lastError).toMatchObject({ code: 'HTTP_429' });
    expect(fake.requestsFor('#rate')).toHaveLength(2);
    const retrying = events.find((e) => e.event === 'status' && e.data.status === 'retrying')!;
    expect(retrying.data).toMatchObject({ attempt: 1, lastError: { code: 'HTTP_429' } });
    // The provider's Retry-After (1 s) set the delay, not the backoff (at most RETRY_BASE_MS, 100 ms,
    // here): retryAt is 1000 ms after the script's clock, and the event's id is stamped by XADD in
    // the same script, at that clock or later (by how long the script ran, which a loaded machine
    // may stretch: the lower bound only tells a second from the backoff's tenth).
    const delay = retrying.data.retryAt - Number(retrying.id.split('-')[0]);
    expect(delay).toBeGreaterThan(500);
    expect(delay).toBeLessThanOrEqual(1000);
    expect(events.filter((e) => e.event === 'ephemeral').map((e) => e.data.text)).toEqual(['[model error: HTTP 429]']);
    expect(clientAnswer(events)).toBe('after the wait');
    expect(history).toEqual([['user', 'hi #rate', false], ['assistant', 'after the wait', false]]);
  });

  it('a 500 is retried too', async () => {
    fake.script('#five', [{ kind: 'status', status: 500 }, { kind: 'stream', tokens: ['fine', ' now'] }]);
    const { run, history } = await chat('five', 'hi #five', { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['succeeded', 2, 'HTTP_500']);
    expect(history).toEqual([['user', 'hi #five', false], ['assistant', 'fine now', false]]);
  });

  it('a stream cut mid-answer is retried; the client stream shows the new attempt and the final answer', async () => {
    fake.script('#cut', [
      { kind: 'cut', tokens: ['The', ' answer', ' is'] },
      { kind: 'stream', tokens: ['The', ' answer', ' is', ' 42', '.'] },
    ]);
    const { run, events, history } = await chat('cut', 'question #cut', { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['succeeded', 2, 'STREAM_CUT']);
    expect(run.result.answer).toBe('The answer is 42.');
    const attempts = events.filter((e) => e.event === 'attempt').map((e) => e.data.attempt);
    expect(attempts).toEqual([1, 2]);
    // Attempt 1's partial text, then the `attempt` event, then attempt 2's whole answer.
    const second = events.findIndex((e) => e.event === 'attempt' && e.data.attempt === 2);
    expect(tokenText(events.slice(0, second))).toBe('The answer is');
    expect(tokenText(events.slice(second))).toBe('The answer is 42.');
    expect(clientAnswer(events)).toBe('The answer is 42.');
    expect(statuses(events)).toContain('retrying');
    expect(history).toEqual([['user', 'question #cut', false], ['assistant', 'The answer is 42.', false]]);
  });

  it('a stream cut after 3 tokens with attempts exhausted: failed, the partial answer committed incomplete', async () => {
    fake.script('#severed', [{ kind: 'cut', tokens: ['Partial', ' answer', ' here'] }]);
    const { run, history } = await chat('severed', 'question #severed', { maxAttempts: 2 });
    expect([run.status, run.attempt, run.lastError.code]).toEqual(['failed', 2, 'STREAM_CUT']);
    expect(run.result).toMatchObject({ answer: 'Partial answer here', finishReason: 'error' });
    expect(fake.requestsFor('#severed')).toHaveLength(2);
    expect(history).toEqual([['user', 'question #severed', false], ['assistant', 'Partial answer here', true]]);
  });

  it('a 400 fails at once: no retry, no history', async () => {
    fake.script('#bad', [{ kind: 'status', status: 400, message: 'messages: too long' }]);
    const { run, events, history } = await chat('bad', 'hi #bad', { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError.code]).toEqual(['failed', 1, 'HTTP_400']);
    expect(run.lastError.message).toContain('too long');
    expect(fake.requestsFor('#bad')).toHaveLength(1);
    expect(statuses(events)).not.toContain('retrying');
    expect(history).toEqual([]);
  });

  it('401 and 404 are permanent as well', async () => {
    fake.script('#auth', [{ kind: 'status', status: 401 }]);
    fake.script('#model', [{ kind: 'status', status: 404 }]);
    for (const [tag, code] of [['#auth', 'HTTP_401'], ['#model', 'HTTP_404']]) {
      const { run } = await chat(`perm${tag.slice(1)}`, `hi ${tag}`, { maxAttempts: 3 });
      expect([run.status, run.attempt, run.lastError.code]).toEqual(['failed', 1, code]);
    }
  });

  it('a model that stops for length: the run succeeds, the answer is committed incomplete', async () => {
    fake.script('#long', [{ kind: 'stream', tokens: ['Once', ' upon'], finish: 'length' }]);
    const { run, history } = await chat('long', 'story #long');
    expect(run.result).toEqual({ answer: 'Once upon', finishReason: 'length', toolCallsSeen: 0, usage: reportedUsage(fake.requestsFor('#long')) });
    expect(history).toEqual([['user', 'story #long', false], ['assistant', 'Once upon', true]]);
  });

  it('a cancel mid-stream aborts the model request; the partial answer is committed incomplete', async () => {
    const tokens = Array.from({ length: 50 }, (_, i) => ` t${i}`);
    fake.script('#slow', [{ kind: 'stream', tokens, delayMs: 100 }]);
    const sub = await acme.submit('slow', 'go #slow', { agent: 'chat' });
    await waitFor(async () => (await h.redis.xrange(h.keys.scope('acme').events(sub.body.id), '-', '+'))
      .some(([, f]) => f[1] === 'token'), 15_000, 'a token');
    await acme.post(`/runs/${sub.body.id}/cancel`, {});
    const run = await acme.waitStatus(sub.body.id, ['cancelled']);
    const partial = run.result.answer as string;
    expect(partial.length).toBeGreaterThan(0);
    expect(tokens.join('').startsWith(partial)).toBe(true);
    expect(partial).not.toBe(tokens.join(''));
    const msgs = (await acme.get('/sessions/slow/messages')).body.messages;
    expect(msgs.map((m: any) => [m.role, m.content, m.incomplete ?? false])).toEqual([
      ['user', 'go #slow', false], ['assistant', partial, true],
    ]);
  });

  it('the built-in chat agent takes its endpoint, key and model from the worker configuration', async () => {
    const runtime = `${h.runtime}-cfg`;
    await h.spawn('worker', {
      env: { RUNTIME: runtime, OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'from-env', OPENAI_MODEL: 'configured-model' },
    });
    fake.script('#cfg', [{ kind: 'stream', tokens: ['configured'] }]);
    const sub = await acme.submit('cfg', 'hi #cfg', { agent: 'chat', runtime });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
    expect(run.result.answer).toBe('configured');
    expect(fake.requestsFor('#cfg').map((r) => r.model)).toEqual(['configured-model']);
  });
});

/** Runs `fn` with the given OPENAI_* variables set (undefined: unset), restoring them after. */
function withOpenAIEnv<T>(vars: { OPENAI_API_KEY?: string; OPENAI_BASE_URL?: string }, fn: () => T): T {
  const saved = { OPENAI_API_KEY: process.env.OPENAI_API_KEY, OPENAI_BASE_URL: process.env.OPENAI_BASE_URL };
  const set = (name: keyof typeof saved, v: string | undefined) => {
    if (v === undefined) delete process.env[name];
    else process.env[name] = v;
  };
  set('OPENAI_API_KEY', vars.OPENAI_API_KEY);
  set('OPENAI_BASE_URL', vars.OPENAI_BASE_URL);
  try {
    return fn();
  } finally {
    set('OPENAI_API_KEY', saved.OPENAI_API_KEY);
    set('OPENAI_BASE_URL', saved.OPENAI_BASE_URL);
  }
}

describe('createChatAgent configuration', () => {
  it('reads OPENAI_API_KEY and OPENAI_BASE_URL when not given, when the module loads; options win over them', async () => {
    const runtime = `${h.runtime}-env`;
    const [fromEnv, fromOptions] = withOpenAIEnv({ OPENAI_API_KEY: 'key-from-env', OPENAI_BASE_URL: fake.baseURL }, () => [
      createChatAgent({ name: 'env-chat', model: 'fake-model' }),
      // The environment's base URL leads nowhere here: the options' one must be used.
      withOpenAIEnv({ OPENAI_API_KEY: 'key-from-env', OPENAI_BASE_URL: 'http://127.0.0.1:9/v1' }, () =>
        createChatAgent({ name: 'options-chat', model: 'fake-model', baseURL: fake.baseURL, apiKey: 'key-from-options' })),
    ]);
    // The environment was read when the agents were made: it is back as it was by now.
    await h.startWorker({ env: { RUNTIME: runtime }, agents: [fromEnv, fromOptions] });
    fake.script('#from-env', [{ kind: 'stream', tokens: ['env', ' ok'] }]);
    fake.script('#from-options', [{ kind: 'stream', tokens: ['options', ' ok'] }]);
    const [a, b] = await Promise.all([
      acme.submit('env-1', 'hi #from-env', { agent: 'env-chat', runtime }),
      acme.submit('env-2', 'hi #from-options', { agent: 'options-chat', runtime }),
    ]);
    const [runA, runB] = await Promise.all([a, b].map((s) => acme.waitStatus(s.body.id, ['succeeded', 'failed'], 30_000)));
    expect([runA.status, runA.result.answer]).toEqual(['succeeded', 'env ok']);
    expect([runB.status, runB.result.answer]).toEqual(['succeeded', 'options ok']);
    expect(fake.requestsFor('#from-env').map((r) => r.authorization)).toEqual(['Bearer key-from-env']);
    expect(fake.requestsFor('#from-options').map((r) => r.authorization)).toEqual(['Bearer key-from-options']);
  });

  it('with neither a key nor a base URL anywhere it throws when made, naming the agent; blank counts as unset', () => {
    const none = /agent "lonely" has no model endpoint: pass apiKey .* or set OPENAI_API_KEY or OPENAI_BASE_URL/;
    withOpenAIEnv({}, () => {
      expect(() => createChatAgent({ name: 'lonely', model: 'm' })).toThrow(none);
      // A key alone means the OpenAI API; a base URL alone, a server that needs no key.
      expect(() => createChatAgent({ name: 'keyed', model: 'm', apiKey: 'k' })).not.toThrow();
      expect(() => createChatAgent({ name: 'local', model: 'm', baseURL: fake.baseURL })).not.toThrow();
      expect(() => createChatAgent({ name: 'lonely', model: 'm', apiKey: ' ', baseURL: '' })).toThrow(none);
      // The built-in agent is offered by every worker, configured or not: its runs say what is missing.
      expect(() => builtinChatAgent({ OPENAI_MODEL: 'm', CHAT_MAX_TOKENS: 4096 })).not.toThrow();
    });
    withOpenAIEnv({ OPENAI_API_KEY: '', OPENAI_BASE_URL: '  ' }, () => {
      expect(() => createChatAgent({ name: 'lonely', model: 'm' })).toThrow(none);
    });
    withOpenAIEnv({ OPENAI_BASE_URL: 'localhost:8000' }, () => {
      expect(() => createChatAgent({ name: 'typo', model: 'm' })).toThrow('agent "typo": the base URL "localhost:8000" is not an http(s) URL');
    });
  });

  it('a worker refuses to start with a module whose chat agent has no endpoint, and says which agent', async () => {
    const start = h.spawn('worker', {
      env: { RUNTIME: `${h.runtime}-none`, OPENAI_API_KEY: '', OPENAI_BASE_URL: '' },
      agents: [new URL('./fixtures/unconfigured-chat.ts', import.meta.url).pathname],
    });
    await expect(start).rejects.toThrow(/baton worker exited 1:[\s\S]*agent "fx-unconfigured-chat" has no model endpoint/);
  });

  it('the built-in chat agent without an endpoint: its runs fail with CHAT_NOT_CONFIGURED, saying what to set', async () => {
    const runtime = `${h.runtime}-bare`;
    await h.startWorker({ env: { RUNTIME: runtime }, agents: [builtinChatAgent({ OPENAI_MODEL: 'm', CHAT_MAX_TOKENS: 4096 })] });
    const sub = await acme.submit('bare', 'hi', { agent: 'chat', runtime });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
    expect([run.status, run.attempt, run.lastError.code]).toEqual(['failed', 1, 'CHAT_NOT_CONFIGURED']);
    expect(run.lastError.message).toContain('set OPENAI_API_KEY (for the OpenAI API) or OPENAI_BASE_URL');
  });
});
