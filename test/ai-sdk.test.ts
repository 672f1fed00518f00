import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, type RunContext } from '../src/lib/sdk/agent.ts';
import { durableModel, durableTools } from '../src/lib/sdk/ai.ts';
import { TransientError } from '../src/lib/sdk/errors.ts';
import { answer, callTools, reportedUsage, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from './helpers/fake-openai.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText, type SseEvent } from './helpers/http.ts';

/**
 * baton/ai: the AI SDK's own loop (streamText / generateText with tools), with its OpenAI
 * provider (chat completions API) pointed at the fake server, made durable by
 * durableModel/durableTools, on real Redis and a real worker.
 */
let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;

/** Side effects of the tools, by `<user message>:<what>`. */
const effects = new Map<string, number>();
const count = (what: string) => {
  const n = (effects.get(what) ?? 0) + 1;
  effects.set(what, n);
  return n;
};

function toolsFor(ctx: RunContext) {
  const content = ctx.input.content;
  return durableTools(ctx, {
    weather: tool({
      description: 'Current temperature in a city, in °C.',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        count(`${content}:weather:${city}`);
        return { city, temp: city === 'Paris' ? 21 : 18 };
      },
    }),
    // Always broken: an ordinary error, which the SDK hands to the model.
    radar: tool({
      description: 'Rain radar for a region.',
      inputSchema: z.object({ region: z.string() }),
      execute: async (): Promise<string> => {
        count(`${content}:radar`);
        throw new Error('radar offline');
      },
    }),
    // Busy the first time it runs for a run, fine after.
    alerts: tool({
      description: 'Weather alerts for a region.',
      inputSchema: z.object({ region: z.string() }),
      execute: async ({ region }) => {
        if (count(`${content}:alerts`) === 1) throw new TransientError('alerts service busy', 'ALERTS_BUSY');
        return `no alerts for ${region}`;
      },
    }),
  });
}

/**
 * The agent a user would write: the AI SDK's loop over the session history. The answer is
 * the text of every step, as readers saw it streamed (`result.text` is the last step's).
 */
const forecaster = (baseURL: string) => defineAgent({
  name: 'ai-forecaster',
  async run(ctx) {
    const provider = createOpenAI({ baseURL, apiKey: 'test-key' });
    const model = durableModel(ctx, provider.chat('fake-model'));
    const messages = [
      ...ctx.history.map((m) => ({ role: m.role as 'user' | 'assistant', content: m.content })),
      { role: 'user' as const, content: ctx.input.content },
    ];
    const common = { model, tools: toolsFor(ctx), stopWhen: stepCountIs(5), system: 'You report the weather.', messages, abortSignal: ctx.signal };
    if (ctx.metadata.mode === 'generate') {
      const result = await generateText(common);
      return { answer: result.steps.map((s) => s.text).join('') };
    }
    const result = streamText(common);
    return { answer: (await result.steps).map((s) => s.text).join('') };
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
  await h.startWorker({ agents: [forecaster(fake.baseURL)] });
});

async function ask(sessionId: string, content: string, extra: Record<string, unknown> = {}) {
  const sub = await acme.submit(sessionId, content, { agent: 'ai-forecaster', ...extra });
  expect(sub.status).toBe(202);
  const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'cancelled'], 30_000);
  const sse = await acme.sse(`/runs/${run.id}/events`);
  const msgs = (await acme.get(`/sessions/${sessionId}/messages`)).body.messages as any[];
  const steps = await h.redis.hgetall(h.keys.scope('acme').steps(run.id));
  return { run, events: sse.events, history: msgs.map((m) => [m.role, m.content, m.incomplete ?? false]), steps };
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

/** [call id, content] of a request's tool messages; content parsed when it is JSON (a string result is sent as is). */
const toolMessages = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'tool').map((m) => {
  try { return [m.tool_call_id, JSON.parse(m.content)]; } catch { return [m.tool_call_id, m.content]; }
});

const loop = () => [
  callTools([{ id: 'c-paris', name: 'weather', arguments: { city: 'Paris' } }, { id: 'c-berlin', name: 'weather', arguments: { city: 'Berlin' } }]),
  answer('Paris is at 21 °C, Berlin at 18 °C.'),
];

describe('baton/ai with the AI SDK', () => {
  for (const mode of ['stream', 'generate'] as const) {
    it(`${mode}Text: model → two tool calls → model → answer, each call and tool a memoized step`, async () => {
      const marker = `#ai-loop-${mode}`;
      fake.script(marker, loop());
      const content = `Weather in Paris and Berlin? ${marker}`;
      const { run, events, history, steps } = await ask(`ai-loop-${mode}`, content, { metadata: { mode } });
      expect(run.status).toBe('succeeded');
      const requests = fake.requestsFor(marker);
      // Both calls' usage, as the provider reported it (streamed with usage enabled, or in the JSON body).
      expect(run.result).toEqual({
        answer: 'Paris is at 21 °C, Berlin at 18 °C.', finishReason: 'stop', toolCallsSeen: 2, usage: reportedUsage(requests),
      });
      expect(history).toEqual([['user', content, false], ['assistant', 'Paris is at 21 °C, Berlin at 18 °C.', false]]);
      expect(tokenText(events)).toBe('Paris is at 21 °C, Berlin at 18 °C.');
      // durableTools reports each call and its result: streamed, tagged with the agent, never in
      // the history. The AI SDK runs a step's tools side by side, so results come in any order.
      const tools = events.filter((e) => e.event.startsWith('tool-')).map((e) => [e.event, e.data.callId, e.data.agent, e.data.role, e.data.ok]);
      expect(tools.filter(([type]) => type === 'tool-call')).toEqual([
        ['tool-call', 'c-paris', 'ai-forecaster', 'assistant', undefined], ['tool-call', 'c-berlin', 'ai-forecaster', 'assistant', undefined],
      ]);
      expect(tools.filter(([type]) => type === 'tool-result').sort()).toEqual([
        ['tool-result', 'c-berlin', 'ai-forecaster', 'tool', true], ['tool-result', 'c-paris', 'ai-forecaster', 'tool', true],
      ]);

      expect(requests.map((r) => r.stream)).toEqual(mode === 'stream' ? [true, true] : [false, false]);
      expect(toolMessages(requests[1])).toEqual([['c-paris', { city: 'Paris', temp: 21 }], ['c-berlin', { city: 'Berlin', temp: 18 }]]);
      expect(Object.keys(steps).sort()).toEqual(['infer:model:1', 'infer:model:2', 'tool:weather:1', 'tool:weather:2']);
      // The stored model call holds the response with the usage the provider reported.
      const first = JSON.parse(steps['infer:model:1']).v;
      const reported = requests[0].usage!;
      const usage = mode === 'stream' ? first.parts.find((p: any) => p.type === 'finish').usage : first.usage;
      expect([usage.inputTokens.total, usage.outputTokens.total]).toEqual([reported.prompt_tokens, reported.completion_tokens]);
      expect([effects.get(`${content}:weather:Paris`), effects.get(`${content}:weather:Berlin`)]).toEqual([1, 1]);
    });
  }

  it('a tool that throws TransientError retries the run; the memo replays the first call and its text', async () => {
    fake.script('#ai-blip', [
      answer('Looking it up.', { toolCalls: [{ id: 'c-w', name: 'weather', arguments: { city: 'Paris' } }, { id: 'c-a', name: 'alerts', arguments: { region: 'IDF' } }] }),
      answer(' 21 °C, no alerts.'),
    ]);
    const content = 'Paris, alerts? #ai-blip';
    const { run, events, history } = await ask('ai-blip', content, { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['succeeded', 2, 'ALERTS_BUSY']);
    // The model was asked twice in all: its first answer came from the memo in attempt 2, with its text.
    const requests = fake.requestsFor('#ai-blip');
    expect(requests).toHaveLength(2);
    expect(run.result).toEqual({ answer: 'Looking it up. 21 °C, no alerts.', finishReason: 'stop', toolCallsSeen: 2, usage: reportedUsage(requests) });
    const second = events.findIndex((e) => e.event === 'attempt' && e.data.attempt === 2);
    expect(tokenText(events.slice(0, second))).toBe('Looking it up.');
    expect(tokenText(events.slice(second))).toBe('Looking it up. 21 °C, no alerts.');
    expect(clientAnswer(events)).toBe('Looking it up. 21 °C, no alerts.');
    expect(effects.get(`${content}:weather:Paris`)).toBe(1);
    expect(effects.get(`${content}:alerts`)).toBe(2);
    expect(toolMessages(requests[1])).toEqual([['c-w', { city: 'Paris', temp: 21 }], ['c-a', 'no alerts for IDF']]);
    expect(history).toEqual([['user', content, false], ['assistant', 'Looking it up. 21 °C, no alerts.', false]]);
  });

  it('an ordinary tool error reaches the model and is stored: the retry does not run the tool again', async () => {
    fake.script('#ai-radar', [
      callTools([{ id: 'c-r', name: 'radar', arguments: { region: 'IDF' } }, { id: 'c-a', name: 'alerts', arguments: { region: 'IDF' } }]),
      answer('No radar, no alerts.'),
    ]);
    const content = 'Rain? #ai-radar';
    const { run } = await ask('ai-radar', content, { maxAttempts: 3 });
    // alerts was busy in attempt 1 (a TransientError ends the attempt at the next model call).
    expect([run.status, run.attempt, run.result.answer]).toEqual(['succeeded', 2, 'No radar, no alerts.']);
    expect(effects.get(`${content}:radar`)).toBe(1);
    const requests = fake.requestsFor('#ai-radar');
    expect(requests).toHaveLength(2);
    expect(toolMessages(requests[1])).toEqual([['c-r', expect.stringContaining('radar offline')], ['c-a', 'no alerts for IDF']]);
  });

  it('bad tool arguments go back to the model as a tool error, and the model recovers', async () => {
    fake.script('#ai-bad', [
      callTools([{ id: 'c-bad', name: 'weather', arguments: { city: 42 } }]),
      callTools([{ id: 'c-good', name: 'weather', arguments: { city: 'Paris' } }]),
      answer('Paris: 21 °C.'),
    ]);
    const content = 'Paris? #ai-bad';
    const { run } = await ask('ai-bad', content);
    expect([run.status, run.attempt, run.result.answer]).toEqual(['succeeded', 1, 'Paris: 21 °C.']);
    const requests = fake.requestsFor('#ai-bad');
    expect(requests).toHaveLength(3);
    expect(requests[1].messages.find((m) => m.role === 'tool')?.content).toMatch(/Invalid input for tool weather/i);
    expect(effects.get(`${content}:weather:Paris`)).toBe(1);
  });

  it('a 429 from the provider is retried by Baton after its Retry-After, not by the AI SDK', async () => {
    fake.script('#ai-rate', [{ kind: 'status', status: 429, retryAfter: '1' }, answer('After the wait.')]);
    const { run, events } = await ask('ai-rate', 'hi #ai-rate', { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code, run.result.answer]).toEqual(['succeeded', 2, 'HTTP_429', 'After the wait.']);
    expect(fake.requestsFor('#ai-rate')).toHaveLength(2);
    const retrying = events.find((e) => e.event === 'status' && e.data.status === 'retrying')!;
    expect(retrying.data.retryAt - Number(retrying.id.split('-')[0])).toBeGreaterThan(990);
    expect(events.filter((e) => e.event === 'ephemeral').map((e) => e.data.text)).toEqual(['[model error: HTTP 429]']);
  });

  it('a stream cut mid-answer is a transient failure; the retry streams the whole answer', async () => {
    fake.script('#ai-cut', [{ kind: 'cut', tokens: ['The', ' answer'] }, answer('The answer is 42.')]);
    const { run, events, history } = await ask('ai-cut', 'question #ai-cut', { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['succeeded', 2, 'STREAM_CUT']);
    expect(clientAnswer(events)).toBe('The answer is 42.');
    expect(history).toEqual([['user', 'question #ai-cut', false], ['assistant', 'The answer is 42.', false]]);
  });

  it('refuses approval-gated tools until waits exist', () => {
    const ctx = { } as RunContext;
    const t = tool({ description: 'd', inputSchema: z.object({}), execute: async () => 'x' });
    expect(() => durableTools(ctx, { pay: t }, { pay: { approval: true } })).toThrow(/waits feature/);
    expect(() => durableTools(ctx, { pay: { ...t, needsApproval: true } })).toThrow(/waits feature/);
  });
});
