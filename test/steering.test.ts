import { fileURLToPath } from 'node:url';
import { createOpenAI } from '@ai-sdk/openai';
import { stepCountIs, streamText, tool, type ModelMessage } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createChatAgent, defineTool } from '../src/lib/agents/chat.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { durableModel, durableTools, steeringMessages } from '../src/lib/sdk/ai.ts';
import { answer, callTools, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from './helpers/fake-openai.ts';
import { fx, fxSet, runEvents } from './helpers/engine.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { scrape, total } from './helpers/prom-text.ts';

/**
 * Steering (multitask `steer`, docs/steering.md) with real API and worker processes and the
 * fake OpenAI-compatible server: messages sent into a running turn reach its next model call
 * in order, exactly once, across a worker SIGKILL; one the run did not take becomes the
 * session's next turn; a resend answers the first outcome.
 */
const TOOL_FIXTURE = fileURLToPath(new URL('./fixtures/tool-agents.ts', import.meta.url));

let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;
let metricsOf: { api: string; worker: string };

/** Latches the in-process agents wait on, by name: `reached` says the agent is there, `go` lets it on. */
const latches = new Map<string, { reached: () => void; go: Promise<void>; open: () => void; at: Promise<void> }>();
function latch(name: string) {
  let known = latches.get(name);
  if (!known) {
    let reached!: () => void;
    let open!: () => void;
    const at = new Promise<void>((r) => { reached = r; });
    const go = new Promise<void>((r) => { open = r; });
    latches.set(name, (known = { reached, open, go, at }));
  }
  return known;
}

/** Waits inside a tool call (the moment a steering message is sent "while the agent is in its tool calls"). */
const hold = defineTool({
  description: 'Looks something up (slowly).',
  parameters: z.object({ topic: z.string() }),
  async execute({ topic }) {
    const l = latch(topic);
    l.reached();
    await l.go;
    return { topic, found: true };
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
  const worker = await h.startWorker({
    agents: [
      createChatAgent({ name: 'helper', model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key', tools: { hold } }),
      // baton/ai: the AI SDK's loop; steering reaches its next model call, and after the loop steeringMessages goes on.
      defineAgent({
        name: 'ai-helper',
        async run(ctx) {
          const model = durableModel(ctx, createOpenAI({ baseURL: fake.baseURL, apiKey: 'test-key' }).chat('fake-model'));
          const tools = durableTools(ctx, {
            hold: tool({ description: 'Looks something up (slowly).', inputSchema: z.object({ topic: z.string() }), execute: (args) => hold.execute(args, {} as never) }),
          });
          let messages: ModelMessage[] = [{ role: 'user', content: ctx.input.content }];
          let answer = '';
          for (;;) {
            const result = streamText({ model, tools, stopWhen: stepCountIs(5), messages, abortSignal: ctx.signal });
            answer += (await result.steps).map((s) => s.text).join('');
            const more = await steeringMessages(ctx);
            if (more.length === 0) return { answer };
            messages = [...messages, ...(await result.response).messages, ...more];
          }
        },
      }),
      // A custom agent: its one boundary, then the end, after the test says so.
      defineAgent({
        name: 'closer',
        async run(ctx) {
          const taken = await ctx.steering.take();
          const l = latch(`closer:${ctx.input.content}`);
          l.reached();
          await l.go;
          return `closed ${ctx.input.content}${taken.length ? ` with ${taken.map((m) => m.content).join(', ')}` : ''}`;
        },
      }),
    ],
  });
  metricsOf = { api: `${api.url}/metrics`, worker: `${worker.opsUrl}/metrics` };
});

afterAll(async () => {
  for (const l of latches.values()) l.open();
  await fake?.close();
});

/** The user messages of a model call after its last tool message (what the boundary added). */
const afterTools = (r: RecordedRequest) => {
  const lastTool = r.messages.map((m) => m.role).lastIndexOf('tool');
  if (lastTool < 0) return [];
  return r.messages.slice(lastTool + 1).filter((m) => m.role === 'user').map((m) => m.content);
};

const steer = (sessionId: string, content: string, messageId: string, extra: Record<string, unknown> = {}) =>
  acme.submit(sessionId, content, { multitask: 'steer', messageId, ...extra });

const history = async (sessionId: string) =>
  (await acme.get(`/sessions/${sessionId}/messages`)).body.messages.map((m: any) => [m.role, m.content]);

const steeringEvents = async (runId: string) =>
  (await runEvents(h, 'acme', runId)).filter((e) => e.type === 'steering').map((e) => e.data);

describe('steering a running turn', () => {
  it('three messages sent during the tool calls reach the next model call in order, once each; a resend answers the first outcome', async () => {
    fake.script('#three', [
      callTools([{ id: 't-1', name: 'hold', arguments: { topic: 'three' } }]),
      answer('Noted all three.'),
    ]);
    const sub = await acme.submit('steer-three', 'Look it up #three', { agent: 'helper' });
    expect(sub.status).toBe(202);
    const runId = sub.body.id as string;
    await latch('three').at;

    const sent = [];
    for (const n of [1, 2, 3]) sent.push(await steer('steer-three', `also ${n} #three`, `three-${n}`, { agent: 'helper' }));
    for (const [i, s] of sent.entries()) {
      expect(s.status).toBe(202);
      expect(s.body.id).toBe(runId);
      expect(s.body.steering).toEqual({ messageId: `three-${i + 1}`, runId, outcome: 'pending' });
    }
    latch('three').open();
    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 30_000);
    expect(run.status).toBe('succeeded');

    // Two model calls: the first before any message, the second with all three after the tool result, in order.
    const calls = fake.requestsFor('#three');
    expect(calls).toHaveLength(2);
    expect(afterTools(calls[0])).toEqual([]);
    expect(afterTools(calls[1])).toEqual(['also 1 #three', 'also 2 #three', 'also 3 #three']);
    expect(await history('steer-three')).toEqual([
      ['user', 'Look it up #three'],
      ['user', 'also 1 #three'], ['user', 'also 2 #three'], ['user', 'also 3 #three'],
      ['assistant', 'Noted all three.'],
    ]);
    expect(await steeringEvents(runId)).toEqual([
      ...[1, 2, 3].map((n) => ({ messageId: `three-${n}`, outcome: 'pending' })),
      ...[1, 2, 3].map((n) => ({ messageId: `three-${n}`, outcome: 'delivered', step: 1, content: `also ${n} #three` })),
    ]);

    const again = await steer('steer-three', 'also 2 #three', 'three-2', { agent: 'helper' });
    expect(again.status).toBe(200);
    expect(again.body.steering).toEqual({ messageId: 'three-2', runId, outcome: 'delivered', step: 1 });
    // The same id with other text is another message: refused, not delivered.
    expect((await steer('steer-three', 'something else #three', 'three-2', { agent: 'helper' })).body.error.code).toBe('IDEMPOTENCY_MISMATCH');
    expect((await acme.get('/runs?sessionId=steer-three')).body.runs).toHaveLength(1);
  });

  it('a model that had finished its answer is called once more with a message sent while it answered', async () => {
    let release!: () => void;
    const open = new Promise((r) => { release = () => r(undefined); });
    fake.script('#late', [answer('First answer here.', { gate: { after: 1, open } }), answer('And about that, yes.')]);
    const runId = (await acme.submit('steer-late', 'Say something #late', { agent: 'helper' })).body.id as string;
    await waitFor(() => fake.requestsFor('#late')[0]?.tokensSent >= 1, 20_000, 'the answer to be halfway');
    expect((await steer('steer-late', 'one more thing #late', 'late-1', { agent: 'helper' })).body.steering.outcome).toBe('pending');
    release();
    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 30_000);
    expect(run.result.answer).toBe('First answer here.\n\nAnd about that, yes.');
    const calls = fake.requestsFor('#late');
    expect(calls).toHaveLength(2);
    expect(calls[1].messages.slice(-2).map((m) => [m.role, m.content])).toEqual([
      ['assistant', 'First answer here.'], ['user', 'one more thing #late'],
    ]);
    expect(await history('steer-late')).toEqual([
      ['user', 'Say something #late'], ['assistant', 'First answer here.'],
      ['user', 'one more thing #late'], ['assistant', 'And about that, yes.'],
    ]);
  });

  it('baton/ai delivers them too: into the AI SDK loop\'s next model call, and after a finished answer through steeringMessages', async () => {
    let release!: () => void;
    const open = new Promise((r) => { release = () => r(undefined); });
    fake.script('#ai', [
      callTools([{ id: 'a-1', name: 'hold', arguments: { topic: 'ai' } }]),
      answer('Got the first two.', { gate: { after: 1, open } }),
      answer('And the third.'),
    ]);
    const runId = (await acme.submit('steer-ai', 'Look it up #ai', { agent: 'ai-helper' })).body.id as string;
    await latch('ai').at;
    for (const n of [1, 2]) expect((await steer('steer-ai', `ai ${n} #ai`, `ai-${n}`)).body.steering.outcome).toBe('pending');
    latch('ai').open();
    // The loop's last model call is halfway: its boundary has passed.
    await waitFor(() => fake.requestsFor('#ai')[1]?.tokensSent >= 1, 20_000, 'the second model call to be halfway');
    expect((await steer('steer-ai', 'ai 3 #ai', 'ai-3')).body.steering.outcome).toBe('pending');
    release();
    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 30_000);
    expect(run.result.answer).toBe('Got the first two.And the third.');
    const text = (c: unknown) => (typeof c === 'string' ? c : (c as { text: string }[]).map((p) => p.text).join(''));
    const users = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'user').map((m) => text(m.content));
    const calls = fake.requestsFor('#ai');
    expect(calls.map(users)).toEqual([
      ['Look it up #ai'],
      ['Look it up #ai', 'ai 1 #ai', 'ai 2 #ai'],
      ['Look it up #ai', 'ai 1 #ai', 'ai 2 #ai', 'ai 3 #ai'],
    ]);
    expect(await history('steer-ai')).toEqual([
      ['user', 'Look it up #ai'], ['user', 'ai 1 #ai'], ['user', 'ai 2 #ai'],
      ['assistant', 'Got the first two.'], ['user', 'ai 3 #ai'], ['assistant', 'And the third.'],
    ]);
    expect((await steeringEvents(runId)).filter((e) => e.outcome === 'delivered')).toEqual([
      { messageId: 'ai-1', outcome: 'delivered', step: 1, content: 'ai 1 #ai' }, { messageId: 'ai-2', outcome: 'delivered', step: 1, content: 'ai 2 #ai' },
      { messageId: 'ai-3', outcome: 'delivered', step: 2, content: 'ai 3 #ai' },
    ]);
  });

  it('a message sent as the run ends becomes the next turn: not delivered, never lost, never twice', async () => {
    const first = await acme.submit('steer-end', 'A', { agent: 'closer' });
    const runId = first.body.id as string;
    // Past its one boundary: nothing will take the message now.
    await latch('closer:A').at;
    const sent = await steer('steer-end', 'B', 'end-b', { agent: 'closer' });
    expect(sent.body.steering).toEqual({ messageId: 'end-b', runId, outcome: 'pending' });
    latch('closer:B').open();
    latch('closer:A').open();
    expect((await acme.waitStatus(runId, ['succeeded', 'failed'], 30_000)).result.answer).toBe('closed A');

    const [event] = (await steeringEvents(runId)).filter((e) => e.outcome !== 'pending');
    expect(event).toMatchObject({ messageId: 'end-b', outcome: 'not-delivered', reason: 'succeeded' });
    const next = await acme.waitStatus(event.turnRunId, ['succeeded', 'failed'], 30_000);
    expect(next).toMatchObject({ status: 'succeeded', sessionId: 'steer-end', agent: 'closer', input: { content: 'B' } });
    expect(await history('steer-end')).toEqual([['user', 'A'], ['assistant', 'closed A'], ['user', 'B'], ['assistant', 'closed B']]);
    const again = await steer('steer-end', 'B', 'end-b', { agent: 'closer' });
    expect(again.status).toBe(200);
    expect(again.body.steering).toEqual({ messageId: 'end-b', runId, outcome: 'not-delivered', reason: 'succeeded', turnRunId: next.id });
    expect((await acme.get('/runs?sessionId=steer-end')).body.runs).toHaveLength(2);
  });

  it('a message the run did not take before it was cancelled becomes the next turn, queued before runs sent after it', async () => {
    const runId = (await acme.submit('steer-cancel', 'C', { agent: 'closer' })).body.id as string;
    await latch('closer:C').at;
    expect((await steer('steer-cancel', 'D', 'cancel-d', { agent: 'closer' })).body.steering.outcome).toBe('pending');
    const later = (await acme.submit('steer-cancel', 'E', { agent: 'closer' })).body.id as string;
    for (const n of ['D', 'E']) latch(`closer:${n}`).open();
    expect((await acme.post(`/runs/${runId}/cancel`)).status).toBe(200);
    // The worker stops the attempt at the cancel, without the agent's answer; only then may it answer.
    expect((await acme.waitStatus(runId, ['succeeded', 'failed', 'cancelled'], 30_000)).status).toBe('cancelled');
    latch('closer:C').open();
    const [event] = (await steeringEvents(runId)).filter((e) => e.outcome !== 'pending');
    expect(event).toMatchObject({ messageId: 'cancel-d', outcome: 'not-delivered', reason: 'cancelled' });
    await acme.waitStatus(later, ['succeeded', 'failed'], 30_000);
    // D ran before E, though E was submitted first after it: it was sent into the turn before E.
    expect(await history('steer-cancel')).toEqual([['user', 'D'], ['assistant', 'closed D'], ['user', 'E'], ['assistant', 'closed E']]);
  });

  it('with no active run the message starts a turn as enqueue would; a resend answers that run', async () => {
    latch('closer:solo').open();
    const sent = await steer('steer-idle', 'solo', 'idle-1', { agent: 'closer' });
    expect(sent.status).toBe(202);
    expect(sent.body.steering).toEqual({ messageId: 'idle-1', runId: sent.body.id, outcome: 'turn' });
    const again = await steer('steer-idle', 'solo', 'idle-1', { agent: 'closer' });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: sent.body.id, steering: { messageId: 'idle-1', runId: sent.body.id, outcome: 'turn' } });
    expect((await acme.waitStatus(sent.body.id, ['succeeded', 'failed'], 30_000)).result.answer).toBe('closed solo');
    expect((await acme.get('/runs?sessionId=steer-idle')).body.runs).toHaveLength(1);
  });

  it('counts each outcome once: pending and turn where sent, delivered and not delivered where the worker saw them', async () => {
    const count = async (url: string, outcome: string) =>
      total((await scrape(url)).samples, 'baton_steering_messages_total', { runtime: h.runtime, outcome });
    // The tests above: 3 + 1 + 3 + 1 + 1 sent into running turns, 1 turn started; 3 + 1 + 3 delivered, 2 not.
    expect([await count(metricsOf.api, 'pending'), await count(metricsOf.api, 'turn')]).toEqual([9, 1]);
    expect([await count(metricsOf.worker, 'delivered'), await count(metricsOf.worker, 'not_delivered')]).toEqual([7, 2]);
  });

  it('refuses a message id without steer, and an idempotency key, ttlMs or artifacts with it', async () => {
    const bad = async (extra: Record<string, unknown>) => (await acme.submit('steer-bad', 'x', { agent: 'closer', ...extra })).body;
    expect((await bad({ messageId: 'm-1' })).error.details).toEqual([expect.objectContaining({ path: 'body.messageId' })]);
    expect((await bad({ multitask: 'steer', idempotencyKey: 'k' })).error.details).toEqual([expect.objectContaining({ path: 'body.idempotencyKey' })]);
    expect((await bad({ multitask: 'steer', ttlMs: 1000 })).error.details).toEqual([expect.objectContaining({ path: 'body.ttlMs' })]);
    expect((await bad({ multitask: 'steer', messageId: '{no}' })).error.code).toBe('VALIDATION_FAILED');
  });
});

describe('steering across a worker SIGKILL', () => {
  it('killed between the send and the boundary, and again after the delivery: each message reaches the model once, in order', async () => {
    // Its own runtime: the file's in-process worker does not offer the fixture agent.
    const runtime = `${h.runtime}-kill`;
    const env = { FAKE_OPENAI_URL: fake.baseURL, RUNTIME: runtime };
    let release!: () => void;
    const open = new Promise((r) => { release = () => r(undefined); });
    fake.script('#kill', [
      callTools([{ id: 'k-1', name: 'weather', arguments: { city: 'Paris' } }, { id: 'k-2', name: 'weather', arguments: { city: 'Berlin' } }]),
      // The second model call is held halfway: the moment of the second kill.
      answer('Paris 21, Berlin 18, and noted.', { gate: { after: 1, open } }),
    ]);
    const a = await h.spawn('worker', { agents: [TOOL_FIXTURE], env: { ...env, FX_TAG: 'A' } });
    const runId = (await acme.submit('steer-kill', 'Paris and Berlin? #kill', { agent: 'fx-tools', runtime })).body.id as string;
    expect(await waitFor(() => fx(h, runId, 'reached'), 20_000, 'worker A to reach the second tool')).toBe('A');
    for (const n of [1, 2, 3]) {
      expect((await steer('steer-kill', `note ${n} #kill`, `kill-${n}`, { agent: 'fx-tools', runtime })).body.steering.outcome).toBe('pending');
    }
    // Worker A dies with the messages sent and its boundary not reached.
    await a.kill('SIGKILL');
    const b = await h.spawn('worker', { agents: [TOOL_FIXTURE], env: { ...env, FX_TAG: 'B' } });
    await fxSet(h, runId, 'go');
    // B took them at the boundary and holds the second model call halfway: it dies there too.
    await waitFor(() => fake.requestsFor('#kill')[1]?.tokensSent >= 1, 30_000, 'worker B to be in the second model call');
    expect((await steeringEvents(runId)).filter((e) => e.outcome === 'delivered')).toHaveLength(3);
    await b.kill('SIGKILL');
    release();
    const c = await h.spawn('worker', { agents: [TOOL_FIXTURE], env: { ...env, FX_TAG: 'C' } });

    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 40_000);
    expect(run).toMatchObject({ status: 'succeeded', recoveries: 2 });
    const calls = fake.requestsFor('#kill');
    // The first model call once (memoized before the kills); the second made by B (cut) and by C,
    // both with the same three messages in order, taken once at boundary 1.
    expect(calls).toHaveLength(3);
    for (const call of calls.slice(1)) expect(afterTools(call)).toEqual(['note 1 #kill', 'note 2 #kill', 'note 3 #kill']);
    expect(await steeringEvents(runId)).toEqual([
      ...[1, 2, 3].map((n) => ({ messageId: `kill-${n}`, outcome: 'pending' })),
      ...[1, 2, 3].map((n) => ({ messageId: `kill-${n}`, outcome: 'delivered', step: 1, content: `note ${n} #kill` })),
    ]);
    expect(await history('steer-kill')).toEqual([
      ['user', 'Paris and Berlin? #kill'],
      ['user', 'note 1 #kill'], ['user', 'note 2 #kill'], ['user', 'note 3 #kill'],
      ['assistant', 'Paris 21, Berlin 18, and noted.'],
    ]);
    expect((await acme.get('/runs?sessionId=steer-kill')).body.runs).toHaveLength(1);
    await c.close();
  });
});
