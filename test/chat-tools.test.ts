import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createChatAgent, defineTool } from '../src/lib/agents/chat.ts';
import { TransientError } from '../src/lib/sdk/errors.ts';
import { answer, callTools, reportedUsage, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from './helpers/fake-openai.ts';
import { fx, fxSet, runEvents, statuses } from './helpers/engine.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText, type SseEvent } from './helpers/http.ts';

/**
 * createChatAgent's tool loop against the fake OpenAI-compatible server, with real Redis and
 * real workers: each model call and each tool run is a memoized step, so neither a retry
 * nor a worker killed mid-loop repeats a model call that answered or a tool that ran.
 */
const TOOL_FIXTURE = fileURLToPath(new URL('./fixtures/tool-agents.ts', import.meta.url));

let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;

/** Side effects of the in-process tools, by `<marker>:<what>`. */
const effects = new Map<string, number>();
const count = (what: string) => {
  const n = (effects.get(what) ?? 0) + 1;
  effects.set(what, n);
  return n;
};

const weather = defineTool({
  description: 'Current temperature in a city, in °C.',
  parameters: z.object({ city: z.string(), unit: z.enum(['C', 'F']).default('C') }),
  execute({ city, unit }, { ctx }) {
    count(`${ctx.input.content}:weather:${city}`);
    return { city, temp: city === 'Paris' ? 21 : 18, unit };
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
  const common = { model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key' };
  await h.startWorker({
    agents: [
      createChatAgent({ ...common, name: 'forecaster', system: 'You report the weather.', tools: { weather } }),
      createChatAgent({
        ...common, name: 'flaky-forecaster', tools: {
          weather,
          // Fails the first time it runs for a run (a provider blip), works the second time.
          alerts: defineTool({
            description: 'Weather alerts for a region.',
            parameters: { type: 'object', properties: { region: { type: 'string' } }, required: ['region'], additionalProperties: false },
            execute(args: { region: string }, { ctx }) {
              if (count(`${ctx.input.content}:alerts`) === 1) throw new TransientError('alerts service busy', 'ALERTS_BUSY');
              return `no alerts for ${args.region}`;
            },
          }),
        },
      }),
      createChatAgent({ ...common, name: 'short-leash', maxSteps: 2, tools: { weather } }),
      createChatAgent({
        ...common, name: 'cashier', tools: {
          weather,
          refund: defineTool({
            description: 'Refunds an order; a person approves each call first.',
            parameters: z.object({ order: z.string() }),
            approval: true,
            execute({ order }, { ctx }) {
              count(`${ctx.input.content}:refund:${order}`);
              return { refunded: order };
            },
          }),
        },
      }),
    ],
  });
});

async function ask(agent: string, sessionId: string, content: string, extra: Record<string, unknown> = {}) {
  const sub = await acme.submit(sessionId, content, { agent, ...extra });
  expect(sub.status).toBe(202);
  const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'cancelled'], 30_000);
  const sse = await acme.sse(`/runs/${run.id}/events`);
  const msgs = (await acme.get(`/sessions/${sessionId}/messages`)).body.messages as any[];
  return { run, events: sse.events, history: msgs.map((m) => [m.role, m.content, m.incomplete ?? false]) };
}

/** The tool messages a request carried, with their content parsed when it is JSON. */
const toolMessages = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'tool').map((m) => {
  let content: unknown = m.content;
  try { content = JSON.parse(m.content); } catch { /* plain text */ }
  return { id: m.tool_call_id, content };
});

/** The tool events of a stream, in order: [type, callId, name, ok?], tagged agent/role checked separately. */
const toolEvents = (events: SseEvent[]) =>
  events.filter((e) => e.event === 'tool-call' || e.event === 'tool-result')
    .map((e) => (e.event === 'tool-call' ? ['call', e.data.callId, e.data.name] : ['result', e.data.callId, e.data.name, e.data.ok]));

describe('createChatAgent tool loop', () => {
  it('model → two tool calls → model → answer: one user and one assistant message, results sent back', async () => {
    fake.script('#loop', [
      callTools([
        { id: 'c-paris', name: 'weather', arguments: { city: 'Paris' } },
        { id: 'c-berlin', name: 'weather', arguments: { city: 'Berlin', unit: 'C' } },
      ], { usage: { prompt_tokens: 30, completion_tokens: 12 } }),
      answer('Paris is at 21 °C, Berlin at 18 °C.', { usage: { prompt_tokens: 70, completion_tokens: 9 } }),
    ]);
    const { run, events, history } = await ask('forecaster', 'loop', 'Weather in Paris and Berlin? #loop');
    expect(run.status).toBe('succeeded');
    // Usage is what the server reported for both calls: 30+70 in, 12+9 out.
    expect(reportedUsage(fake.requestsFor('#loop'))).toEqual({ inputTokens: 100, outputTokens: 21, totalTokens: 121, modelCalls: 2 });
    expect(run.result).toEqual({
      answer: 'Paris is at 21 °C, Berlin at 18 °C.', finishReason: 'stop', toolCallsSeen: 2,
      usage: { inputTokens: 100, outputTokens: 21, totalTokens: 121, modelCalls: 2 },
    });
    expect(history).toEqual([
      ['user', 'Weather in Paris and Berlin? #loop', false], ['assistant', 'Paris is at 21 °C, Berlin at 18 °C.', false],
    ]);
    expect(tokenText(events)).toBe('Paris is at 21 °C, Berlin at 18 °C.');
    // The stream holds the calls and their results, said by the agent (calls) and its tools (results).
    expect(toolEvents(events)).toEqual([
      ['call', 'c-paris', 'weather'], ['result', 'c-paris', 'weather', true],
      ['call', 'c-berlin', 'weather'], ['result', 'c-berlin', 'weather', true],
    ]);
    const [call, result] = events.filter((e) => e.event.startsWith('tool-'));
    expect(call.data).toEqual({ agent: 'forecaster', role: 'assistant', callId: 'c-paris', name: 'weather', args: { city: 'Paris' } });
    expect(result.data).toEqual({
      agent: 'forecaster', role: 'tool', callId: 'c-paris', name: 'weather', ok: true, result: { city: 'Paris', temp: 21, unit: 'C' },
    });
    expect(events.filter((e) => e.event === 'token').every((e) => e.data.agent === 'forecaster' && e.data.role === 'assistant')).toBe(true);

    const [first, second] = fake.requestsFor('#loop');
    expect(fake.requestsFor('#loop')).toHaveLength(2);
    // The model saw the tool with the schema zod made of its parameters (defaults optional to it).
    expect(first.body.tools).toEqual([{
      type: 'function',
      function: {
        name: 'weather', description: 'Current temperature in a city, in °C.',
        parameters: expect.objectContaining({ type: 'object', required: ['city'] }),
      },
    }]);
    expect(first.messages.map((m) => m.role)).toEqual(['system', 'user']);
    // The second request holds the model's calls and both results, in the model's order.
    expect(second.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'tool']);
    expect(second.messages[2].tool_calls!.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['c-paris', 'weather', { city: 'Paris' }], ['c-berlin', 'weather', { city: 'Berlin', unit: 'C' }],
    ]);
    expect(toolMessages(second)).toEqual([
      { id: 'c-paris', content: { city: 'Paris', temp: 21, unit: 'C' } },
      { id: 'c-berlin', content: { city: 'Berlin', temp: 18, unit: 'C' } },
    ]);
    // Each model call's stored value is the whole response, usage included.
    const steps = await h.redis.hgetall(h.keys.scope('acme').steps(run.id));
    expect(Object.keys(steps).sort()).toEqual(['infer:forecaster:1', 'infer:forecaster:2', 'tool:weather:1', 'tool:weather:2']);
    expect(JSON.parse(steps['infer:forecaster:1']).v).toMatchObject({
      text: '', finishReason: 'tool_calls', usage: { inputTokens: 30, outputTokens: 12, totalTokens: 42 },
      toolCalls: [{ id: 'c-paris', name: 'weather' }, { id: 'c-berlin', name: 'weather' }],
    });
    expect(JSON.parse(steps['infer:forecaster:2']).v.usage).toEqual({ inputTokens: 70, outputTokens: 9, totalTokens: 79 });
  });

  it('bad arguments go back to the model as tool errors, and the model recovers', async () => {
    fake.script('#bad-args', [
      callTools([
        { id: 'c-type', name: 'weather', arguments: { city: 42 } },
        { id: 'c-json', name: 'weather', arguments: '{"city": "Par' },
        { id: 'c-name', name: 'forecast', arguments: { city: 'Paris' } },
      ]),
      callTools([{ id: 'c-good', name: 'weather', arguments: { city: 'Paris' } }]),
      answer('Paris: 21 °C.'),
    ]);
    const content = 'Paris? #bad-args';
    const { run, events, history } = await ask('forecaster', 'bad-args', content);
    expect([run.status, run.attempt]).toEqual(['succeeded', 1]);
    const requests = fake.requestsFor('#bad-args');
    // toolCallsSeen counts the calls that ran; the refused ones are in the stream as errors.
    expect(run.result).toEqual({ answer: 'Paris: 21 °C.', finishReason: 'stop', toolCallsSeen: 1, usage: reportedUsage(requests) });
    expect(toolEvents(events)).toEqual([
      ['call', 'c-type', 'weather'], ['result', 'c-type', 'weather', false],
      ['call', 'c-json', 'weather'], ['result', 'c-json', 'weather', false],
      ['call', 'c-name', 'forecast'], ['result', 'c-name', 'forecast', false],
      ['call', 'c-good', 'weather'], ['result', 'c-good', 'weather', true],
    ]);
    // Arguments that are not JSON reach readers as the model sent them.
    expect(events.find((e) => e.event === 'tool-call' && e.data.callId === 'c-json')!.data.args).toBe('{"city": "Par');
    expect(events.find((e) => e.event === 'tool-result' && e.data.callId === 'c-type')!.data.error).toMatch(/do not match the parameters/);
    expect(history.map(([role]) => role)).toEqual(['user', 'assistant']);
    expect(requests).toHaveLength(3);
    expect(toolMessages(requests[1])).toEqual([
      { id: 'c-type', content: { error: 'the arguments do not match the parameters of weather', problems: [expect.stringMatching(/^city: /)] } },
      { id: 'c-json', content: { error: expect.stringContaining('not valid JSON') } },
      { id: 'c-name', content: { error: expect.stringContaining('no tool named "forecast"') } },
    ]);
    expect(toolMessages(requests[2]).at(-1)).toEqual({ id: 'c-good', content: { city: 'Paris', temp: 21, unit: 'C' } });
    // Only the call with good arguments ran the tool.
    expect(effects.get(`${content}:weather:Paris`)).toBe(1);
  });

  it('a tool that throws TransientError retries the run; model calls and tools that finished are not repeated', async () => {
    fake.script('#blip', [
      callTools([{ name: 'weather', arguments: { city: 'Paris' } }, { name: 'alerts', arguments: { region: 'IDF' } }]),
      answer('21 °C and no alerts.'),
    ]);
    const content = 'Paris, alerts? #blip';
    const { run, events, history } = await ask('flaky-forecaster', 'blip', content, { maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['succeeded', 2, 'ALERTS_BUSY']);
    // Attempt 2 took the first model call and the weather lookup from the memo: two calls made, two counted.
    expect(fake.requestsFor('#blip')).toHaveLength(2);
    expect(run.result).toEqual({ answer: '21 °C and no alerts.', finishReason: 'stop', toolCallsSeen: 2, usage: reportedUsage(fake.requestsFor('#blip')) });
    expect(statuses(events.map((e) => ({ id: e.id, type: e.event, data: e.data, at: 0 })))).toContain('retrying');
    // Readers saw why attempt 1 ended, then attempt 2 replay the weather result and run alerts.
    const second = events.findIndex((e) => e.event === 'attempt' && e.data.attempt === 2);
    expect(toolEvents(events.slice(0, second)).slice(-1)).toEqual([['result', expect.any(String), 'alerts', false]]);
    expect(events.slice(0, second).find((e) => e.event === 'tool-result' && !e.data.ok)!.data.error).toBe('alerts service busy');
    expect(toolEvents(events.slice(second)).map(([kind, , name, ok]) => [kind, name, ok])).toEqual([
      ['call', 'weather', undefined], ['result', 'weather', true], ['call', 'alerts', undefined], ['result', 'alerts', true],
    ]);
    expect(effects.get(`${content}:weather:Paris`)).toBe(1);
    expect(effects.get(`${content}:alerts`)).toBe(2);
    expect(toolMessages(fake.requestsFor('#blip')[1]).map((m) => m.content)).toEqual([
      { city: 'Paris', temp: 21, unit: 'C' }, 'no alerts for IDF',
    ]);
    expect(history).toEqual([['user', content, false], ['assistant', '21 °C and no alerts.', false]]);
  });

  it('maxSteps ends a loop that keeps calling tools: finishReason length, the text so far committed incomplete', async () => {
    fake.script('#endless', [
      answer('Checking.', { toolCalls: [{ name: 'weather', arguments: { city: 'Paris' } }] }),
      answer('Still checking.', { toolCalls: [{ name: 'weather', arguments: { city: 'Berlin' } }] }),
    ]);
    const content = 'Weather forever #endless';
    const { run, events, history } = await ask('short-leash', 'endless', content);
    expect(run.status).toBe('succeeded');
    expect(run.result).toEqual({
      answer: 'Checking.\n\nStill checking.', finishReason: 'length', toolCallsSeen: 1, usage: reportedUsage(fake.requestsFor('#endless')),
    });
    expect(tokenText(events)).toBe('Checking.\n\nStill checking.');
    expect(events.filter((e) => e.event === 'ephemeral').map((e) => e.data.text)).toEqual(['[stopped after 2 model calls]']);
    expect(fake.requestsFor('#endless')).toHaveLength(2);
    // The second round's call was never run: its result would reach no model.
    expect([effects.get(`${content}:weather:Paris`), effects.get(`${content}:weather:Berlin`)]).toEqual([1, undefined]);
    expect(history).toEqual([['user', content, false], ['assistant', 'Checking.\n\nStill checking.', true]]);
  });

  it('a worker SIGKILLed after the first tool ran: the answered model call and that tool are not repeated', async () => {
    // Its own runtime: the file's in-process worker does not offer the fixture agent.
    const runtime = `${h.runtime}-kill`;
    const env = { FAKE_OPENAI_URL: fake.baseURL, RUNTIME: runtime };
    fake.script('#crash', [
      callTools([{ id: 'c-1', name: 'weather', arguments: { city: 'Paris' } }, { id: 'c-2', name: 'weather', arguments: { city: 'Berlin' } }]),
      answer('Paris 21 °C, Berlin 18 °C.'),
    ]);
    const a = await h.spawn('worker', { agents: [TOOL_FIXTURE], env: { ...env, FX_TAG: 'A' } });
    const sub = await acme.submit('crash', 'Paris and Berlin? #crash', { agent: 'fx-tools', runtime });
    const runId = sub.body.id as string;
    // Paris ran and was stored; worker A waits inside the Berlin call.
    expect(await waitFor(() => fx(h, runId, 'reached'), 20_000, 'worker A to reach the second tool')).toBe('A');
    expect(await fx(h, runId, 'weather-Paris')).toBe('1');
    const b = await h.spawn('worker', { agents: [TOOL_FIXTURE], env: { ...env, FX_TAG: 'B' } });
    await a.kill('SIGKILL');
    await fxSet(h, runId, 'go');

    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 30_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 1 });
    // One request for the first turn (answered before the crash, taken from the memo after
    // it) and one for the answer: the model was not asked again for the turn it had answered.
    expect(fake.requestsFor('#crash')).toHaveLength(2);
    // Each call made counted once: the first by worker A when it stored the turn, the second by B.
    expect(run.result).toEqual({
      answer: 'Paris 21 °C, Berlin 18 °C.', finishReason: 'stop', toolCallsSeen: 2, usage: reportedUsage(fake.requestsFor('#crash')),
    });
    expect([await fx(h, runId, 'weather-Paris'), await fx(h, runId, 'weather-Berlin')]).toEqual(['1', '1']);
    // The results the model got: Paris from worker A's stored step, Berlin from worker B.
    expect(toolMessages(fake.requestsFor('#crash')[1]).map((m) => [m.id, (m.content as any).by])).toEqual([['c-1', 'A'], ['c-2', 'B']]);
    expect(statuses(await runEvents(h, 'acme', runId))).toEqual(['queued', 'running', 'recovered']);
    const msgs = (await acme.get('/sessions/crash/messages')).body.messages;
    expect(msgs.map((m: any) => [m.role, m.content])).toEqual([['user', 'Paris and Berlin? #crash'], ['assistant', 'Paris 21 °C, Berlin 18 °C.']]);
    await b.close();
  });

  it('takes a tool that asks for approval (test/waits-agents.test.ts runs one), refuses a tool name a step key cannot hold', () => {
    const base = { name: 'gated', model: 'm', baseURL: fake.baseURL };
    const tool = { description: 'd', parameters: { type: 'object' }, execute: () => 'x' };
    expect(() => createChatAgent({ ...base, tools: { pay: { ...tool, approval: true } } })).not.toThrow();
    expect(() => createChatAgent({ ...base, tools: { 'pay:now': tool } })).toThrow(/must match/);
    expect(() => createChatAgent({ ...base, tools: { pay: { ...tool, parameters: { type: 'nonsense' } } } })).toThrow(/not a valid JSON Schema/);
  });
});

describe('toolCallsSeen', () => {
  /** Submits to `cashier`, answers its one approval wait with `decision`, and returns the finished run. */
  async function decided(sessionId: string, content: string, decision: { approved: boolean; reason?: string }) {
    const sub = await acme.submit(sessionId, content, { agent: 'cashier' });
    const waiting = await acme.waitStatus(sub.body.id, ['waiting', 'failed'], 30_000);
    expect(waiting.waits.map((w: any) => [w.key, w.kind])).toEqual([['wait:refund:1', 'approval']]);
    expect((await acme.post(`/runs/${sub.body.id}/waits/wait:refund:1`, { value: decision })).status).toBe(200);
    return acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
  }

  it('counts the calls that ran: a declined call is not one of them, an approved one is', async () => {
    const calls = [
      { id: 'c-refund', name: 'refund', arguments: { order: 'A-1' } },
      { id: 'c-weather', name: 'weather', arguments: { city: 'Paris' } },
    ];
    fake.script('#no-refund', [callTools(calls), answer('No refund; Paris is at 21 °C.')]);
    const no = await decided('seen-no', 'Refund A-1, and the weather? #no-refund', { approved: false, reason: 'not today' });
    expect(no.status).toBe('succeeded');
    expect(effects.get('Refund A-1, and the weather? #no-refund:refund:A-1')).toBeUndefined();
    expect(no.result).toMatchObject({ answer: 'No refund; Paris is at 21 °C.', toolCallsSeen: 1 });

    fake.script('#refund', [callTools(calls.map((c) => ({ ...c, id: `${c.id}-2` }))), answer('Refunded A-1; Paris is at 21 °C.')]);
    const yes = await decided('seen-yes', 'Refund A-1, and the weather? #refund', { approved: true });
    expect(effects.get('Refund A-1, and the weather? #refund:refund:A-1')).toBe(1);
    expect(yes.result).toMatchObject({ answer: 'Refunded A-1; Paris is at 21 °C.', toolCallsSeen: 2 });
  });
});
