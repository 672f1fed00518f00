import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createOpenAI } from '@ai-sdk/openai';
import { stepCountIs, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { classify } from '../src/lib/sdk/retry-policy.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { durableModel, durableTools } from '../src/lib/sdk/ai.ts';
import * as own from '../src/lib/sdk/errors.ts';
import { runEvents, statuses } from './helpers/engine.ts';
import { answer, callTools, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { ROOT, useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * An agent module that bundles its own copy of the SDK throws errors of its copy's classes,
 * and catches the worker's errors with its copy's classes. Both sides recognise each other's
 * errors by their brand: a second copy of the errors module, loaded from another path, is a
 * distinct module with distinct classes, and runs that throw its errors on a real worker are
 * classified exactly as runs that throw Baton's own.
 */
const copyDir = mkdtempSync(join(tmpdir(), 'baton-errors-copy-'));
copyFileSync(join(ROOT, 'src/lib/sdk/errors.ts'), join(copyDir, 'errors.ts'));
const copy = (await import(pathToFileURL(join(copyDir, 'errors.ts')).href)) as typeof own;
afterAll(() => rmSync(copyDir, { recursive: true, force: true }));

let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;

/** Executions per run, counted in this process (the worker runs in it too). */
const executions = new Map<string, number>();
const execution = (runId: string) => {
  const n = (executions.get(runId) ?? 0) + 1;
  executions.set(runId, n);
  return n;
};

/** Throws the copy's error named by `input.content` on its first execution; succeeds on the next. */
const copyThrower = defineAgent({
  name: 'copy-thrower',
  async run(ctx) {
    const n = execution(ctx.runId);
    if (n === 1) {
      const what = ctx.input.content;
      if (what === 'transient') throw new copy.TransientError('blip from the copy', 'COPY_BLIP');
      if (what === 'retry-after') throw new copy.RetryAfterError('slow down, says the copy', 1200);
      if (what === 'permanent') throw new copy.PermanentError('bad input, says the copy', 'COPY_BAD');
    }
    return { answer: `ok on attempt ${ctx.attempt} after ${n} executions` };
  },
});

/** Catches the worker's WaitTimeoutError and ToolDeclinedError with the copy's classes. */
const copyCatcher = defineAgent({
  name: 'copy-catcher',
  async run(ctx) {
    const seen: string[] = [];
    try {
      await ctx.waitFor('answer', { timeoutMs: 300 });
      seen.push('answered');
    } catch (err) {
      if (!(err instanceof copy.WaitTimeoutError)) throw err;
      seen.push(`timed out (${err.waitKey}, guard ${copy.isWaitTimeoutError(err)})`);
    }
    try {
      await ctx.tool('ship', { to: 'prod' }, () => 'shipped', { approval: true });
      seen.push('shipped');
    } catch (err) {
      if (!(err instanceof copy.ToolDeclinedError)) throw err;
      seen.push(`declined (${err.reason}, guard ${copy.isToolDeclinedError(err)})`);
    }
    return { answer: seen.join('; ') };
  },
});

/** The AI SDK's loop through baton/ai: a tool throws the copy's TransientError once. */
const aiAgent = (baseURL: string) => defineAgent({
  name: 'copy-ai',
  async run(ctx) {
    const model = durableModel(ctx, createOpenAI({ baseURL, apiKey: 'test-key' }).chat('fake-model'));
    const tools = durableTools(ctx, {
      lookup: tool({
        description: 'Look an order up.',
        inputSchema: z.object({ order: z.string() }),
        execute: async ({ order }) => {
          if (execution(ctx.runId) === 1) throw new copy.TransientError('the order service blipped', 'COPY_BLIP');
          return { order, state: 'shipped' };
        },
      }),
    });
    const messages = [{ role: 'user' as const, content: ctx.input.content }];
    const result = streamText({ model, tools, stopWhen: stepCountIs(4), messages, abortSignal: ctx.signal });
    return { answer: (await result.steps).map((s) => s.text).join('') };
  },
});

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  await h.startWorker({ agents: [copyThrower, copyCatcher, aiAgent(fake.baseURL)] });
  acme = await h.client(api.url, 'acme');
});

describe('a second copy of the errors module', () => {
  it('is a distinct module whose classes are other objects', () => {
    expect(copy.TransientError).not.toBe(own.TransientError);
    expect(copy.PermanentError).not.toBe(own.PermanentError);
    expect(Object.getPrototypeOf(new copy.TransientError('x'))).not.toBe(own.TransientError.prototype);
  });

  it('classifies the same as the worker own classes, subclasses included', () => {
    expect(classify(new copy.TransientError('t', 'COPY_T'))).toEqual({ kind: 'transient', code: 'COPY_T', message: 't' });
    expect(classify(new copy.RetryAfterError('r', 750)))
      .toEqual({ kind: 'transient', code: 'RETRY_AFTER', message: 'r', retryAfterMs: 750 });
    expect(classify(new copy.PermanentError('p', 'COPY_P'))).toMatchObject({ kind: 'permanent', code: 'COPY_P', message: 'p' });
    expect(classify(new copy.WaitTimeoutError('answer', 'wait:answer:1'))).toMatchObject({ kind: 'permanent', code: 'WAIT_TIMEOUT' });
    expect(classify(new copy.ToolDeclinedError('ship', 'no'))).toMatchObject({ kind: 'permanent', code: 'TOOL_DECLINED' });
    const problems = [{ path: '', message: 'm' }];
    expect(classify(new copy.OutputInvalidError(problems)))
      .toMatchObject({ kind: 'permanent', code: 'OUTPUT_INVALID', details: problems });
  });

  it('type guards and instanceof recognise either copy; the brands keep the hierarchy and nothing else', () => {
    for (const [mine, theirs] of [[own, copy], [copy, own]] as const) {
      const retry = new theirs.RetryAfterError('r', 1);
      const declined = new theirs.ToolDeclinedError('ship', undefined);
      expect([mine.isTransientError(retry), mine.isRetryAfterError(retry), mine.isPermanentError(retry)]).toEqual([true, true, false]);
      expect([retry instanceof mine.TransientError, retry instanceof mine.RetryAfterError, retry instanceof mine.PermanentError])
        .toEqual([true, true, false]);
      const guards = [mine.isPermanentError, mine.isToolDeclinedError, mine.isWaitTimeoutError, mine.isTransientError];
      expect(guards.map((guard) => guard(declined)))
        .toEqual([true, true, false, false]);
      const kinds = [mine.PermanentError, mine.ToolDeclinedError, mine.WaitTimeoutError];
      expect(kinds.map((kind) => declined instanceof kind)).toEqual([true, true, false]);
      expect(new theirs.TransientError('t') instanceof mine.RetryAfterError).toBe(false);
      expect(new theirs.PermanentError('p') instanceof mine.WaitTimeoutError).toBe(false);
    }
    // Not errors of these kinds: plain errors, look-alikes by name, values that are no objects.
    for (const v of [new Error('x'), Object.assign(new Error('x'), { name: 'TransientError' }), null, undefined, 'TransientError', 42]) {
      expect(own.isTransientError(v)).toBe(false);
      expect(v instanceof own.TransientError).toBe(false);
    }
    // A value whose property reads throw is no branded error, and the guard does not throw.
    const hostile = new Proxy({}, { get() { throw new Error('no reads'); } });
    expect(own.isPermanentError(hostile)).toBe(false);
    expect(hostile instanceof own.PermanentError).toBe(false);
  });

  it('a subclass in user code keeps the ordinary instanceof for itself and is recognised as its base', () => {
    class Overloaded extends copy.TransientError {
      constructor(readonly region: string) {
        super(`overloaded in ${region}`, 'OVERLOADED');
      }
    }
    const e = new Overloaded('eu');
    expect(e instanceof Overloaded).toBe(true);
    expect(new copy.TransientError('t') instanceof Overloaded).toBe(false);
    expect(new own.TransientError('t') instanceof Overloaded).toBe(false);
    expect(e instanceof own.TransientError).toBe(true);
    expect(classify(e)).toEqual({ kind: 'transient', code: 'OVERLOADED', message: 'overloaded in eu' });
    // OutputInvalidError has no brand of its own: instanceof on it is the ordinary one.
    expect(new own.PermanentError('p') instanceof own.OutputInvalidError).toBe(false);
    expect(new own.OutputInvalidError([]) instanceof own.OutputInvalidError).toBe(true);
  });
});

describe('runs whose agent throws the copy errors', () => {
  it('a TransientError from the copy is retried, and the run succeeds on its second attempt', async () => {
    const run = (await acme.submit('copy-transient', 'transient', { agent: 'copy-thrower', maxAttempts: 3 })).body;
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    expect(done).toMatchObject({ status: 'succeeded', attempt: 2, result: { answer: 'ok on attempt 2 after 2 executions' } });
    expect(executions.get(run.id)).toBe(2);
    const events = await runEvents(h, 'acme', run.id);
    expect(statuses(events)).toEqual(['queued', 'running', 'retrying', 'running']);
    expect(events.find((e) => e.type === 'status' && e.data.status === 'retrying')?.data.lastError)
      .toMatchObject({ code: 'COPY_BLIP', message: 'blip from the copy' });
  });

  it('a PermanentError from the copy fails the run without a retry', async () => {
    const run = (await acme.submit('copy-permanent', 'permanent', { agent: 'copy-thrower', maxAttempts: 3 })).body;
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    expect(done).toMatchObject({ status: 'failed', attempt: 1, lastError: { code: 'COPY_BAD', message: 'bad input, says the copy' } });
    expect(executions.get(run.id)).toBe(1);
    expect(statuses(await runEvents(h, 'acme', run.id))).toEqual(['queued', 'running']);
  });

  it('a RetryAfterError from the copy is retried after the delay it names', async () => {
    const run = (await acme.submit('copy-retry-after', 'retry-after', { agent: 'copy-thrower', maxAttempts: 3 })).body;
    const retrying = await acme.waitStatus(run.id, ['retrying', 'succeeded', 'failed'], 30_000);
    expect(retrying).toMatchObject({ status: 'retrying', attempt: 1, lastError: { code: 'RETRY_AFTER' } });
    // updatedAt and retryAt are stamped by one script: their gap is the delay chosen.
    expect(Date.parse(retrying.retryAt) - Date.parse(retrying.updatedAt)).toBe(1200);
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    expect(done).toMatchObject({ status: 'succeeded', attempt: 2 });
    const events = await runEvents(h, 'acme', run.id);
    const retryAt = events.find((e) => e.type === 'status' && e.data.status === 'retrying')!.data.retryAt;
    expect(events.filter((e) => e.type === 'status' && e.data.status === 'running')[1].at).toBeGreaterThanOrEqual(retryAt);
  });

  it('the worker WaitTimeoutError and ToolDeclinedError are caught with the copy classes', async () => {
    const run = (await acme.submit('copy-catcher', 'go', { agent: 'copy-catcher' })).body;
    const waiting = await waitForWait(run.id, 'wait:ship:1');
    const decline = { value: { approved: false, reason: 'freeze week' } };
    const decided = await acme.post(`/runs/${run.id}/waits/${encodeURIComponent(waiting.key)}`, decline);
    expect(decided.status).toBe(200);
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    const expected = 'timed out (wait:answer:1, guard true); declined (freeze week, guard true)';
    expect(done).toMatchObject({ status: 'succeeded', result: { answer: expected } });
  });

  it('baton/ai ends the attempt on a tool that throws the copy TransientError, and the retry succeeds', async () => {
    fake.script('#copy-ai', [callTools([{ id: 'l-1', name: 'lookup', arguments: { order: 'D-4' } }]), answer('D-4 has shipped.')]);
    const run = (await acme.submit('copy-ai', 'Where is D-4? #copy-ai', { agent: 'copy-ai', maxAttempts: 3 })).body;
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
    // Had the tool's error gone to the model as its answer, the run would end on its first attempt.
    expect(done).toMatchObject({ status: 'succeeded', attempt: 2, result: { answer: 'D-4 has shipped.' } });
    const events = await runEvents(h, 'acme', run.id);
    expect(events.find((e) => e.type === 'status' && e.data.status === 'retrying')?.data.lastError).toMatchObject({ code: 'COPY_BLIP' });
    // The model heard the tool's result from the retry, never its error.
    const toolMessages = fake.requestsFor('#copy-ai').flatMap((r) => r.messages.filter((m) => m.role === 'tool'));
    expect(toolMessages.map((m) => JSON.parse(m.content as string))).toEqual([{ order: 'D-4', state: 'shipped' }]);
  });
});

/** Polls the run until the wait `key` is pending on it. */
async function waitForWait(runId: string, key: string): Promise<{ key: string }> {
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    const run = (await acme.get(`/runs/${runId}`)).body;
    const w = run.waits?.find((x: { key: string }) => x.key === key);
    if (w) return w;
    if (['succeeded', 'failed', 'cancelled'].includes(run.status)) throw new Error(`run ${runId} ended: ${JSON.stringify(run)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`no wait ${key} on run ${runId}`);
}
