import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { openGate, sessionAgents } from './fixtures/session-agents.ts';

/**
 * The answer envelope: every finished run has result { answer, finishReason, toolCallsSeen,
 * payload? }; a goal finish is validated against the submit's outputSchema; cancelled and
 * failed runs never are.
 */
let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({ agents: sessionAgents });
  acme = await h.client(api.url, 'acme', 'client');
});

const ticket = {
  type: 'object',
  properties: {
    priority: { enum: ['low', 'high'] },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['priority'],
  additionalProperties: false,
};

async function run(sessionId: string, agent: string, metadata: Record<string, unknown>, outputSchema?: object) {
  const sub = await acme.submit(sessionId, 'classify this', { agent, metadata, ...(outputSchema ? { outputSchema } : {}) });
  expect(sub.status).toBe(202);
  return acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'cancelled']);
}

describe('outputSchema at submit', () => {
  const bad: [string, object][] = [
    ['an unknown type', { type: 'nope' }],
    ['required that is not a list', { type: 'object', required: 'priority' }],
    ['a reference that cannot be resolved', { $ref: 'https://example.invalid/schema.json' }],
  ];
  for (const [name, schema] of bad) {
    it(`is 400 OUTPUT_SCHEMA_INVALID for ${name}, and nothing is created`, async () => {
      const before = (await h.allKeys()).filter((k) => k.includes('{acme}')).sort();
      const res = await acme.submit('bad-schema', 'x', { outputSchema: schema });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('OUTPUT_SCHEMA_INVALID');
      expect(res.body.error.details[0].path).toBe('body.outputSchema');
      expect(res.body.error.details[0].message).toBeTypeOf('string');
      expect((await h.allKeys()).filter((k) => k.includes('{acme}')).sort()).toEqual(before);
    });
  }

  it('is 400 when it is not an object at all', async () => {
    const res = await acme.submit('bad-schema', 'x', { outputSchema: 'string' });
    expect(res.status).toBe(400);
    expect(res.body.error.details.map((d: any) => d.path)).toContain('body.outputSchema');
  });
});

describe('answer envelope', () => {
  it('a run without outputSchema: { answer, finishReason, toolCallsSeen } and the payload as returned', async () => {
    const r = await run('env-plain', 'structured', { answer: 'hi', payload: { any: 'thing' } });
    expect(r.result).toEqual({ answer: 'hi', finishReason: 'stop', toolCallsSeen: 0, payload: { any: 'thing' } });
  });

  it('a goal finish whose payload matches: payload holds the validated value', async () => {
    const payload = { priority: 'high', tags: ['billing'] };
    const r = await run('env-ok', 'structured', { answer: 'High priority.', payload }, ticket);
    expect(r.status).toBe('succeeded');
    expect(r.result).toEqual({ answer: 'High priority.', finishReason: 'stop', toolCallsSeen: 0, payload });
  });

  it('a goal finish with no payload: the answer text is parsed as JSON and validated', async () => {
    const r = await run('env-text', 'structured', { answer: '{"priority":"low"}' }, ticket);
    expect(r.status).toBe('succeeded');
    expect(r.result.payload).toEqual({ priority: 'low' });
  });

  it('a goal finish that does not match fails the run with OUTPUT_INVALID and the validation errors', async () => {
    const r = await run('env-bad', 'structured', { answer: 'urgent!', payload: { priority: 'urgent', extra: 1 } }, ticket);
    expect(r.status).toBe('failed');
    expect(r.lastError.code).toBe('OUTPUT_INVALID');
    const details = r.lastError.details as { path: string; message: string }[];
    expect(details.map((d) => d.path).sort()).toEqual(['/', '/priority']);
    expect(details.map((d) => d.message).join(' ')).toMatch(/extra/);
    expect(r.result).toEqual({ answer: 'urgent!', finishReason: 'error', toolCallsSeen: 0 });
    // Invalid output is not silently kept: the answer is in the history marked incomplete.
    const msgs = (await acme.get('/sessions/env-bad/messages')).body.messages;
    expect(msgs.map((m: any) => [m.role, m.content, m.incomplete ?? false])).toEqual([
      ['user', 'classify this', false], ['assistant', 'urgent!', true],
    ]);
    const sse = await acme.sse(`/runs/${r.id}/events`);
    expect(sse.events.at(-1)!.data).toMatchObject({ status: 'failed', error: { code: 'OUTPUT_INVALID' } });
  });

  it('an answer that is not JSON (and no payload) fails with OUTPUT_INVALID', async () => {
    const r = await run('env-notjson', 'structured', { answer: 'High, I think.' }, ticket);
    expect(r.status).toBe('failed');
    expect(r.lastError.code).toBe('OUTPUT_INVALID');
    expect(r.lastError.details[0].message).toMatch(/not JSON/);
  });

  it('draft 2020-12 schemas are understood', async () => {
    const pair = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], items: false };
    const ok = await run('env-2020', 'structured', { answer: '["a", 1]' }, pair);
    expect([ok.status, ok.result.payload]).toEqual(['succeeded', ['a', 1]]);
    const bad = await run('env-2020', 'structured', { answer: '["a", 1, 2]' }, pair);
    expect([bad.status, bad.lastError.code]).toEqual(['failed', 'OUTPUT_INVALID']);
  });

  it('a truncated finish is not a goal finish: not validated, and it carries no payload', async () => {
    const r = await run('env-trunc', 'structured', { answer: '{"prio', payload: { priority: 'nope' }, finishReason: 'length' }, ticket);
    expect(r.status).toBe('succeeded');
    expect(r.result).toEqual({ answer: '{"prio', finishReason: 'length', toolCallsSeen: 0 });
  });

  it('an agent that returns no answer fails its run at once (no lease left behind to recover)', async () => {
    const r = await run('env-shape', 'bad-shape', {});
    expect([r.status, r.attempt, r.recoveries, r.lastError.code]).toEqual(['failed', 1, 0, 'TypeError']);
    expect(r.result).toEqual({ answer: '', finishReason: 'error', toolCallsSeen: 0 });
  });

  it('failed and cancelled runs are never validated', async () => {
    const failed = await run('env-failed', 'fails-mid-answer', {}, ticket);
    expect([failed.status, failed.lastError.code]).toEqual(['failed', 'FX_BROKE']);

    const sub = await acme.submit('env-cancel', 'env-cancel-gate', { agent: 'gated', outputSchema: ticket });
    await acme.waitStatus(sub.body.id, ['running']);
    await waitFor(async () => (await h.redis.xrange(h.keys.scope('acme').events(sub.body.id), '-', '+'))
      .some(([, f]) => f[1] === 'token'), 15_000, 'a token');
    await acme.post(`/runs/${sub.body.id}/cancel`, {});
    const cancelled = await acme.waitStatus(sub.body.id, ['cancelled']);
    expect(cancelled.lastError).toBeUndefined();
    expect(cancelled.result).toEqual({ answer: 'holding env-cancel-gate', finishReason: 'cancelled', toolCallsSeen: 0 });
    openGate('env-cancel-gate');
  });
});
