import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { TransientError } from '../src/lib/sdk/errors.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { runEvents, statuses } from './helpers/engine.ts';

/**
 * MAX_RUN_MS: a run cannot hold a worker forever. The time workers hold it is summed over
 * its attempts; when the sum reaches the ceiling its signal aborts and it fails with
 * RUN_TIMEOUT, the text it streamed kept as an incomplete answer (like a cancel).
 */
const MAX_RUN_MS = 2_000;

let h: Harness;
let acme: ScopeClient;

const never = (signal: AbortSignal) => new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));

const agents = [
  defineAgent({
    name: 'stuck',
    async run(ctx) {
      ctx.emit('thinking about it');
      return never(ctx.signal);
    },
  }),
  defineAgent({
    // Ignores its signal altogether: the executor stops waiting for it anyway.
    name: 'deaf',
    async run(ctx) {
      ctx.emit('not listening');
      return new Promise<string>(() => {});
    },
  }),
  defineAgent({
    // Spends most of the budget in a first attempt that fails transiently; the retry gets what is left.
    name: 'slow-then-stuck',
    async run(ctx) {
      if (ctx.attempt === 1) {
        await new Promise((r) => setTimeout(r, MAX_RUN_MS / 2));
        throw new TransientError('upstream blip');
      }
      ctx.emit('second try');
      return never(ctx.signal);
    },
  }),
];

beforeAll(async () => {
  h = await useHarness({ MAX_RUN_MS: String(MAX_RUN_MS) });
  const api = await h.startApi();
  await h.startWorker({ agents });
  acme = await h.client(api.url, 'acme', 'client');
});

describe('the run time ceiling', () => {
  it('a run that never ends fails with RUN_TIMEOUT, its streamed text committed as incomplete', async () => {
    const [stuck, deaf] = await Promise.all([
      acme.submit('stuck', 'take your time', { agent: 'stuck' }),
      acme.submit('deaf', 'take your time', { agent: 'deaf' }),
    ]);
    for (const [sub, text] of [[stuck, 'thinking about it'], [deaf, 'not listening']] as const) {
      const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
      expect(run).toMatchObject({ status: 'failed', attempt: 1, recoveries: 0, lastError: { code: 'RUN_TIMEOUT' } });
      expect(run.lastError.message).toContain(`MAX_RUN_MS (${MAX_RUN_MS} ms)`);
      expect(run.result).toEqual({ answer: text, finishReason: 'error', toolCallsSeen: 0 });
      const messages = (await acme.get(`/sessions/${run.sessionId}/messages`)).body.messages;
      expect(messages.map((m: any) => [m.role, m.content, m.incomplete])).toEqual([
        ['user', 'take your time', undefined], ['assistant', text, true],
      ]);
      const events = await runEvents(h, 'acme', run.id);
      expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'failed', error: { code: 'RUN_TIMEOUT' } } });
    }
  });

  it('the ceiling counts every attempt: a retry gets only what the first attempt left', async () => {
    const sub = await acme.submit('retried', 'go', { agent: 'slow-then-stuck' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect(run).toMatchObject({ status: 'failed', attempt: 2, lastError: { code: 'RUN_TIMEOUT' } });
    expect(run.result.answer).toBe('second try');
    const events = await runEvents(h, 'acme', run.id);
    expect(statuses(events)).toEqual(['queued', 'running', 'retrying', 'running']);
    // The scripts stamp the events and the held time with the same Redis clock: the first
    // attempt held the run from its `running` to its `retrying` event. What the record sums
    // beyond that is the second attempt's, which was stopped short of a whole MAX_RUN_MS.
    const at = (status: string) => events.find((e) => e.type === 'status' && e.data.status === status)!.at;
    const first = at('retrying') - at('running');
    const total = Number(await h.redis.hget(h.keys.scope('acme').run(run.id), 'runMs'));
    expect(total).toBeGreaterThanOrEqual(MAX_RUN_MS);
    expect(total - first).toBeLessThan(MAX_RUN_MS);
  });
});
