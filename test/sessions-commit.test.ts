import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { openGate, sessionAgents } from './fixtures/session-agents.ts';

/**
 * Invariant 7, the turn commit rules: user message and answer committed together, exactly
 * once per run; nothing without assistant content; `incomplete` after error, cancel or
 * truncation; ephemeral notices and tool calls never persisted; retries and recoveries
 * never duplicate anything.
 */
const FIXTURE = fileURLToPath(new URL('./fixtures/session-agents.ts', import.meta.url));

let h: Harness;
let apiUrl: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  apiUrl = (await h.startApi()).url;
  await h.startWorker({ agents: sessionAgents });
  acme = await h.client(apiUrl, 'acme', 'client');
});

const history = async (sessionId: string) =>
  ((await acme.get(`/sessions/${sessionId}/messages`)).body.messages as any[])
    .map((m) => [m.role, m.content, m.incomplete ?? false]);

async function runTo(sessionId: string, agent: string, content: string, statuses: string[], extra: Record<string, unknown> = {}) {
  const sub = await acme.submit(sessionId, content, { agent, ...extra });
  expect(sub.status).toBe(202);
  return acme.waitStatus(sub.body.id, statuses);
}

describe('turn commit rules', () => {
  it('a run that produced no assistant content commits nothing: no dangling user message', async () => {
    const ok = await runTo('no-content', 'silent', 'anyone there?', ['succeeded']);
    expect(ok.result).toEqual({ answer: '', finishReason: 'stop', toolCallsSeen: 0 });
    const failed = await runTo('no-content', 'fails-early', 'and now?', ['failed']);
    expect(failed.lastError.code).toBe('FX_REFUSED');
    expect(await history('no-content')).toEqual([]);
  });

  it('an error after some content commits the answer marked incomplete', async () => {
    const run = await runTo('err-mid', 'fails-mid-answer', 'tell me', ['failed']);
    expect(run.result).toMatchObject({ answer: 'half an answer', finishReason: 'error' });
    expect(run.lastError.code).toBe('FX_BROKE');
    expect(await history('err-mid')).toEqual([['user', 'tell me', false], ['assistant', 'half an answer', true]]);
  });

  it('a cancel after some content commits the answer marked incomplete', async () => {
    const sub = await acme.submit('cancel-mid', 'cancel-me', { agent: 'gated' });
    await waitFor(async () => {
      const events = await h.redis.xrange(h.keys.scope('acme').events(sub.body.id), '-', '+');
      return events.some(([, f]) => f[1] === 'token');
    }, 15_000, 'a token');
    expect((await acme.post(`/runs/${sub.body.id}/cancel`, {})).status).toBe(200);
    const run = await acme.waitStatus(sub.body.id, ['cancelled']);
    expect(run.result).toMatchObject({ answer: 'holding cancel-me', finishReason: 'cancelled' });
    expect(await history('cancel-mid')).toEqual([['user', 'cancel-me', false], ['assistant', 'holding cancel-me', true]]);
    openGate('cancel-me');
  });

  it('a truncated answer (finishReason length) is committed marked incomplete; the run still succeeds', async () => {
    const run = await runTo('trunc', 'truncated', 'write a novel', ['succeeded']);
    expect(run.result).toEqual({ answer: 'cut sh', finishReason: 'length', toolCallsSeen: 0 });
    expect(await history('trunc')).toEqual([['user', 'write a novel', false], ['assistant', 'cut sh', true]]);
  });

  it('ephemeral notices are streamed, never persisted; tool calls are counted, not persisted', async () => {
    const run = await runTo('notes', 'notices-and-tools', 'abcdef', ['succeeded']);
    const answer = 'the input has 6 characters';
    expect(run.result).toEqual({ answer, finishReason: 'stop', toolCallsSeen: 1 });
    const sse = await acme.sse(`/runs/${run.id}/events`);
    expect(sse.events.filter((e) => e.event === 'ephemeral').map((e) => e.data.text)).toEqual(['looking that up…']);
    expect(tokenText(sse.events)).toBe(answer);
    expect(await history('notes')).toEqual([['user', 'abcdef', false], ['assistant', answer, false]]);
  });

  it('a retried run commits one user message and the answer of the attempt that finished', async () => {
    const run = await runTo('retried', 'flaky-once', 'try me', ['succeeded'], { maxAttempts: 3 });
    expect(run.attempt).toBe(2);
    expect(run.result.answer).toBe('second try');
    const sse = await acme.sse(`/runs/${run.id}/events`);
    expect(sse.events.filter((e) => e.event === 'status').map((e) => e.data.status)).toContain('retrying');
    expect(await history('retried')).toEqual([['user', 'try me', false], ['assistant', 'second try', false]]);
  });

  it('a worker killed mid-answer and recovered by another commits one user and one assistant message', async () => {
    const runtime = `${h.runtime}-kill`;
    const doomed = await h.spawn('worker', { env: { RUNTIME: runtime, SESSION_FX_HANG: '1' }, agents: [FIXTURE] });
    const content = 'one two three four five six';
    const sub = await acme.submit('killed', content, { agent: 'mid-answer', runtime });
    expect(sub.status).toBe(202);
    await waitFor(async () => {
      const events = await h.redis.xrange(h.keys.scope('acme').events(sub.body.id), '-', '+');
      return events.filter(([, f]) => f[1] === 'token').length > 0;
    }, 20_000, 'the doomed worker to stream part of the answer');
    await doomed.kill('SIGKILL');
    const killedAt = Date.now();
    // Nothing was committed by the dead worker.
    expect(await history('killed')).toEqual([]);

    await h.startWorker({ env: { RUNTIME: runtime }, agents: sessionAgents });
    const run = await acme.waitStatus(sub.body.id, ['succeeded'], 30_000);
    console.log(`killed mid-answer: recovered and finished ${Date.now() - killedAt} ms after SIGKILL (lease ${h.config.LEASE_MS} ms)`);
    expect(run.recoveries).toBe(1);
    expect(run.result.answer).toBe(content);
    expect(await history('killed')).toEqual([['user', content, false], ['assistant', content, false]]);
    // The stream shows the takeover: an `attempt` event marks where the answer text restarts.
    const sse = await acme.sse(`/runs/${sub.body.id}/events`);
    const attempts = sse.events.filter((e) => e.event === 'attempt');
    expect(attempts.length).toBe(2);
    const lastAttempt = sse.events.lastIndexOf(attempts[1]);
    expect(tokenText(sse.events.slice(lastAttempt))).toBe(content);
  });
});
