import { createOpenAI } from '@ai-sdk/openai';
import { stepCountIs, streamText, tool } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { durableModel, durableTools } from '../src/lib/sdk/ai.ts';
import { TransientError } from '../src/lib/sdk/errors.ts';
import { agentRole, and, not, or, role, type AgentEvent } from '../src/lib/sdk/select.ts';
import { answer, callTools, reportedUsage, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText, type SseEvent } from './helpers/http.ts';

/**
 * A supervisor that hands research to a sub-agent, both on the AI SDK's OpenAI provider
 * pointed at the fake server, on real Redis and a real worker. `select` keeps only the
 * supervisor's own text: the researcher's text and tool traffic reach neither readers nor
 * the history, and `onSkip` sees all of it.
 */
let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;

/** What onSkip saw (tests run one at a time; each starts with an empty list). */
let skipped: AgentEvent[] = [];
/** Runs (by user message) whose supervisor has already failed once on purpose. */
const failedOnce = new Set<string>();

const supervisor = (baseURL: string) => defineAgent({
  name: 'supervisor',
  select: agentRole('supervisor', 'assistant'),
  onSkip(e) {
    skipped.push(e);
  },
  async run(ctx) {
    const provider = createOpenAI({ baseURL, apiKey: 'test-key' });
    const researcher = ctx.subagent('researcher');
    const notes = streamText({
      model: durableModel(researcher, provider.chat('fake-model')),
      tools: durableTools(researcher, {
        search: tool({
          description: 'Searches the web.',
          inputSchema: z.object({ q: z.string() }),
          execute: async ({ q }) => ({ q, hits: ['Baton keeps runs in Redis.'] }),
        }),
      }),
      stopWhen: stepCountIs(3),
      prompt: `Research this: ${ctx.input.content}`,
      abortSignal: ctx.signal,
    });
    const research = (await notes.steps).map((s) => s.text).join('');
    const final = streamText({
      model: durableModel(ctx, provider.chat('fake-model')),
      system: 'Answer from the research notes.',
      prompt: `${ctx.input.content}\n\nNotes: ${research}`,
      abortSignal: ctx.signal,
    });
    const text = await final.text;
    if (ctx.metadata.failOnce && !failedOnce.has(ctx.input.content)) {
      failedOnce.add(ctx.input.content);
      throw new TransientError('the supervisor tripped after answering', 'TRIPPED');
    }
    return { answer: text };
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
  await h.startWorker({ agents: [supervisor(fake.baseURL)] });
});

async function ask(sessionId: string, content: string, extra: Record<string, unknown> = {}) {
  skipped = [];
  const sub = await acme.submit(sessionId, content, { agent: 'supervisor', ...extra });
  expect(sub.status).toBe(202);
  const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'cancelled'], 30_000);
  const events = (await acme.sse(`/runs/${run.id}/events`)).events;
  const history = ((await acme.get(`/sessions/${sessionId}/messages`)).body.messages as any[]).map((m) => [m.role, m.content, m.incomplete ?? false]);
  const steps = ((await acme.get(`/runs/${run.id}/steps`)).body.steps as any[]);
  return { run, events, history, steps };
}

const research = () => [
  callTools([{ id: 'c-search', name: 'search', arguments: { q: 'baton' } }]),
  answer('Researcher notes: runs live in Redis.'),
];

/** The speakers of a stream's agent events, in order, consecutive repeats folded. */
const speakers = (events: SseEvent[]) =>
  events.filter((e) => ['token', 'ephemeral', 'tool-call', 'tool-result'].includes(e.event))
    .map((e) => `${e.event}:${e.data.agent}/${e.data.role}`)
    .filter((s, i, all) => s !== all[i - 1]);

describe('a supervisor with a researcher sub-agent', () => {
  it("select: agentRole('supervisor', 'assistant'): only the supervisor's text reaches readers and history; onSkip saw the researcher's", async () => {
    fake.script('#sup', [...research(), answer('Baton keeps your runs in Redis.')]);
    const content = 'Where do runs live? #sup';
    const { run, events, history, steps } = await ask('sup', content);
    expect(run.status).toBe('succeeded');
    expect(run.result.answer).toBe('Baton keeps your runs in Redis.');
    expect(tokenText(events)).toBe('Baton keeps your runs in Redis.');
    expect(speakers(events)).toEqual(['token:supervisor/assistant']);
    expect(history).toEqual([['user', content, false], ['assistant', 'Baton keeps your runs in Redis.', false]]);

    // The researcher said all of this, and onSkip saw it, in order.
    const seen = skipped;
    expect(seen.filter((e) => e.type === 'token').map((e) => (e.data as any).text).join('')).toBe('Researcher notes: runs live in Redis.');
    expect(seen.every((e) => e.data.agent === 'researcher')).toBe(true);
    expect(seen.filter((e) => e.type !== 'token').map((e) => [e.type, e.data.role, (e.data as any).callId])).toEqual([
      ['tool-call', 'assistant', 'c-search'], ['tool-result', 'tool', 'c-search'],
    ]);
    expect((seen.find((e) => e.type === 'tool-result')!.data as any).result).toEqual({ q: 'baton', hits: ['Baton keeps runs in Redis.'] });

    // The sub-agent's steps carry its name, so keys stay unique in the run; the researcher's
    // inferences stored no streamed text (none of it was selected), the supervisor's did.
    expect(steps.map((s) => s.key)).toEqual(['infer:researcher.model:1', 'tool:researcher.search:1', 'infer:researcher.model:2', 'infer:model:1']);
    expect(steps.map((s) => s.streamed)).toEqual([undefined, undefined, undefined, 'Baton keeps your runs in Redis.']);
    // Usage counts every call, selected or not, with the toolCallsSeen of the researcher's tool.
    expect(run.result.toolCallsSeen).toBe(1);
    expect(run.result.usage).toEqual(reportedUsage(fake.requestsFor('#sup')));
    expect(run.result.usage.modelCalls).toBe(3);
  });

  it('a retry replays only what was selected, and calls no model again', async () => {
    fake.script('#sup-retry', [...research(), answer('Redis, durably.')]);
    const content = 'Where? #sup-retry';
    const { run, events, history } = await ask('sup-retry', content, { metadata: { failOnce: true }, maxAttempts: 3 });
    expect([run.status, run.attempt, run.lastError?.code]).toEqual(['succeeded', 2, 'TRIPPED']);
    const second = events.findIndex((e) => e.event === 'attempt' && e.data.attempt === 2);
    expect(tokenText(events.slice(0, second))).toBe('Redis, durably.');
    expect(tokenText(events.slice(second))).toBe('Redis, durably.');
    expect(speakers(events)).toEqual(['token:supervisor/assistant']);
    expect(fake.requestsFor('#sup-retry')).toHaveLength(3);
    expect(run.result.usage).toEqual(reportedUsage(fake.requestsFor('#sup-retry')));
    expect(history).toEqual([['user', content, false], ['assistant', 'Redis, durably.', false]]);
  });

  it('a run that fails before the supervisor says anything commits nothing: the researcher\'s text is not the answer', async () => {
    fake.script('#sup-fail', [...research(), { kind: 'status', status: 400, message: 'bad request' }]);
    const content = 'Where? #sup-fail';
    const { run, events, history } = await ask('sup-fail', content);
    expect([run.status, run.lastError?.code]).toEqual(['failed', 'HTTP_400']);
    expect(run.result.answer).toBe('');
    // No dangling user message: there was no selected text to commit with it.
    expect(history).toEqual([]);
    // The supervisor's error notice is its own, so it was streamed; the researcher said nothing readers saw.
    expect(events.filter((e) => e.event === 'ephemeral').map((e) => [e.data.agent, e.data.text])).toEqual([['supervisor', '[model error: HTTP 400]']]);
    expect(tokenText(events)).toBe('');
    // Both researcher calls were made and stored: they are counted even though the run failed.
    expect(run.result.usage).toEqual(reportedUsage(fake.requestsFor('#sup-fail').slice(0, 2)));
  });
});

describe('predicates', () => {
  const ev = (agent: string, r: 'assistant' | 'tool', type: AgentEvent['type'] = 'token'): AgentEvent =>
    ({ type, data: { agent, role: r, text: 'x', callId: 'c', name: 'n', args: {}, ok: true, result: null } }) as AgentEvent;

  it('agentRole, role, and, or, not compose by agent and role', () => {
    const sup = ev('supervisor', 'assistant');
    const res = ev('researcher', 'assistant');
    const resTool = ev('researcher', 'tool', 'tool-result');
    expect([sup, res, resTool].map(agentRole('supervisor', 'assistant'))).toEqual([true, false, false]);
    expect([sup, res, resTool].map(role('tool'))).toEqual([false, false, true]);
    expect([sup, res, resTool].map(or(agentRole('supervisor', 'assistant'), role('tool')))).toEqual([true, false, true]);
    expect([sup, res, resTool].map(and(role('assistant'), not(agentRole('researcher', 'assistant'))))).toEqual([true, false, false]);
    expect([and()(sup), or()(sup)]).toEqual([true, false]);
  });

  it('refuses a select or onSkip that is not a function', () => {
    expect(() => defineAgent({ name: 'x', select: 'supervisor' as never, run: () => '' })).toThrow(/select must be a function/);
    expect(() => defineAgent({ name: 'x', onSkip: {} as never, run: () => '' })).toThrow(/onSkip must be a function/);
  });
});
