import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/index.ts';
import { flaky } from './fixtures/engine-agents.ts';
import { useFixturesInProcess } from './helpers/engine.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/** Names sort the other way from the order they run in; many of them start in one millisecond. */
const QUICK = Array.from({ length: 24 }, (_, i) => `s${String(99 - i).padStart(2, '0')}`);
const quickSteps = defineAgent({
  name: 'quick-steps',
  async run(ctx) {
    for (const name of QUICK) await ctx.step(name, () => name);
    return 'done';
  },
});

/**
 * What the run inspector needs from the API besides the routes it always had: whoami (a key
 * learns its own scope and role) and a run's memoized steps.
 */
let h: Harness;
let url: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  useFixturesInProcess(h);
  url = (await h.startApi()).url;
  await h.startWorker({ agents: [flaky, quickSteps] });
  acme = await h.client(url, 'acme', 'admin');
});

describe('GET /v1/whoami', () => {
  it("answers the presented key's scope and role, and nothing without a valid key", async () => {
    const admin = await call(url, 'GET', '/v1/whoami', undefined, acme.headers);
    expect(admin.status).toBe(200);
    expect(admin.body).toEqual({ scope: 'acme', role: 'admin', keyId: expect.stringMatching(/^k[0-9a-f]{12}$/) });
    expect(admin.headers.get('cache-control')).toBe('no-store');
    const client = await call(url, 'GET', '/v1/whoami', undefined, { authorization: `Bearer ${await h.key('globex', 'client')}` });
    expect(client.body).toMatchObject({ scope: 'globex', role: 'client' });

    const attempts: Record<string, string>[] = [{}, { authorization: 'Bearer bk_this-key-was-never-issued-000000' }, { authorization: 'Basic eDp5' }];
    for (const headers of attempts) {
      const res = await call(url, 'GET', '/v1/whoami', undefined, headers);
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe('UNAUTHENTICATED');
      expect(res.headers.get('www-authenticate')).toBe('Bearer');
    }
    expect((await call(url, 'GET', '/v1/whoami?scope=acme', undefined, acme.headers)).status).toBe(400);
  });
});

describe('GET /v1/scopes/{scope}/runs/{runId}/steps', () => {
  it('lists the memoized steps with their values, streamed text and times', async () => {
    const run = (await acme.submit('steps-1', 'go', { agent: 'fx-flaky' })).body;
    await acme.waitStatus(run.id, ['succeeded']);
    const res = await acme.get(`/runs/${run.id}/steps`);
    expect(res.status).toBe(200);
    const steps = res.body.steps as any[];
    const byKey = steps.map((s) => [s.key, { kind: s.kind, name: s.name, n: s.n, status: s.status, value: s.value, streamed: s.streamed }]);
    expect(Object.fromEntries(byKey)).toEqual({
      'step:prepare:1': { kind: 'step', name: 'prepare', n: 1, status: 'done', value: 1, streamed: undefined },
      'tool:lookup:1': { kind: 'tool', name: 'lookup', n: 1, status: 'done', value: 1, streamed: undefined },
      'tool:lookup:2': { kind: 'tool', name: 'lookup', n: 2, status: 'done', value: 2, streamed: undefined },
      'infer:draft:1': { kind: 'infer', name: 'draft', n: 1, status: 'done', value: 'drafted', streamed: 'draft ' },
    });
    // In the order they ran (the agent runs them one after another).
    const started = steps.map((s) => Date.parse(s.startedAt));
    expect(started).toEqual([...started].sort((a, b) => a - b));
    for (const s of steps) expect(Date.parse(s.finishedAt)).toBeGreaterThanOrEqual(Date.parse(s.startedAt));
    expect(steps.at(-1).key).toBe('infer:draft:1');
  });

  it('lists steps that started in one millisecond in the order they started', async () => {
    const run = (await acme.submit('steps-quick', 'go', { agent: 'quick-steps' })).body;
    await acme.waitStatus(run.id, ['succeeded']);
    const steps = (await acme.get(`/runs/${run.id}/steps`)).body.steps as { name: string; startedAt: string }[];
    expect(steps.map((s) => s.name)).toEqual(QUICK);
    // How many shared their millisecond with the step before (what the order rests on `o` for).
    const shared = steps.filter((s, i) => i > 0 && s.startedAt === steps[i - 1].startedAt).length;
    console.log(`quick steps: ${shared} of ${steps.length} started in the millisecond of the step before`);
  });

  it('is an empty list for a run without steps, and RUN_NOT_FOUND for no run', async () => {
    const run = (await acme.submit('steps-2', 'plain', { agent: 'echo' })).body;
    expect((await acme.get(`/runs/${run.id}/steps`)).body).toEqual({ steps: [], nextCursor: null });
    const missing = await acme.get('/runs/rnosuchrun000000/steps');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('RUN_NOT_FOUND');
  });
});
