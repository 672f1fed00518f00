import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { PermanentError } from '../src/lib/sdk/errors.ts';
import { sleep, useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Invariant 12, poison runs: whatever an agent returns or throws, and whatever its memory
 * store throws, the attempt ends with a classified failure. Before, each of these threw out
 * of the executor's closing path, left the run leased, and the run was taken over into the
 * same throw after every lease, holding its session and a scope slot for good.
 */
let h: Harness;
let acme: ScopeClient;

const agents = [
  defineAgent({
    name: 'bigint-payload',
    async run(ctx) {
      ctx.emit('counted ');
      return { answer: 'counted', payload: { n: 1n } };
    },
  }),
  defineAgent({
    name: 'throws-unreadable',
    async run(ctx) {
      ctx.emit('about to throw ');
      throw Object.create(null);
    },
  }),
  defineAgent({
    name: 'circular-details',
    async run() {
      const errors: Record<string, unknown>[] = [{}];
      errors[0].self = errors;
      throw Object.assign(new PermanentError('refused', 'REFUSED'), { errors });
    },
  }),
  defineAgent({
    name: 'store-throws-null',
    memory: () => ({
      load: async () => [],
      save: async () => {},
      append: async () => { throw null; },
    }),
    async run() {
      return 'an answer the store will not take';
    },
  }),
  defineAgent({
    name: 'payload-breaks-later',
    async run(ctx) {
      ctx.emit('streamed before the end');
      let serialized = 0;
      // Serializable once (the executor's check), then not (the finish): only the last resort closes it.
      return { answer: 'done', payload: { toJSON: () => { if (++serialized > 1) throw new Error('gone'); return 1; } } };
    },
  }),
];

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({ agents });
  acme = await h.client(api.url, 'acme', 'client');
});

describe('exceptions in the closing path of an attempt', () => {
  it('each ends its run failed with a classified error, and the run is never taken over', async () => {
    const cases: [string, Record<string, unknown>][] = [
      ['bigint-payload', { code: 'TypeError', message: expect.stringContaining('the payload cannot be stored as JSON') }],
      ['throws-unreadable', { code: 'AGENT_ERROR', message: 'the agent threw a value that cannot be read as an error' }],
      ['circular-details', { code: 'REFUSED', message: 'refused' }],
      ['store-throws-null', { code: 'AGENT_ERROR', message: 'null' }],
      ['payload-breaks-later', { code: 'CLOSE_FAILED', message: expect.stringContaining('gone') }],
    ];
    const subs = await Promise.all(cases.map(([agent]) => acme.submit(`s-${agent}`, 'go', { agent })));
    const ended = await Promise.all(subs.map((s) => acme.waitStatus(s.body.id, ['succeeded', 'failed'])));
    for (const [i, [agent, lastError]] of cases.entries()) {
      expect([agent, ended[i].status, ended[i].recoveries], agent).toEqual([agent, 'failed', 0]);
      expect(ended[i].lastError, agent).toMatchObject(lastError);
    }
    expect(ended[2].lastError.details).toBeUndefined();
    // The streamed text is the answer of a run that failed on its way out, and no payload is kept.
    expect(ended[4].result).toEqual({ answer: 'streamed before the end', finishReason: 'error', toolCallsSeen: 0 });
    // Failed for good: a lease and two sweeps later none has been taken over.
    await sleep(Number(h.env.LEASE_MS) + 2 * Number(h.env.SWEEP_INTERVAL_MS));
    for (const [i, [agent]] of cases.entries()) {
      const later = (await acme.get(`/runs/${ended[i].id}`)).body;
      expect([agent, later.status, later.recoveries]).toEqual([agent, 'failed', 0]);
    }
    // The sessions moved on: the next run of one of them starts and succeeds.
    const next = await acme.submit('s-bigint-payload', 'again', { agent: 'echo' });
    expect((await acme.waitStatus(next.body.id, ['succeeded', 'failed'])).status).toBe('succeeded');
  });
});
