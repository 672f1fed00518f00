import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { PermanentError } from '../src/lib/sdk/errors.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { BatonClient } from '../src/client.ts';
import { CLI_TEST_TIMEOUT_MS, runBaton, type CliResult } from './helpers/cli.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * Re-running a run from a step and forking a session (invariant 18: a copy never aliases).
 * The agent's four steps count their bodies here (the worker runs in this process), and the
 * fake provider counts the model calls, so a step that was not run again shows in both.
 */
let h: Harness;
let acme: ScopeClient;
let fake: FakeOpenAI;
let apiUrl: string;

/** How often each step's body ran, over every run of the agent. */
const ran = { plan: 0, charge: 0, fetch: 0, answer: 0 };
/** The tool of the third step: broken until the test fixes it. */
let fetchBroken = true;

const fourSteps = defineAgent({
  name: 'ops-four-steps',
  async run(ctx) {
    const plan = await ctx.infer('plan', async () => {
      ran.plan++;
      const openai = new OpenAI({ baseURL: fake.baseURL, apiKey: 'test-key' });
      const reply = await openai.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: `#rerun ${ctx.input.content}` }] });
      return reply.choices[0].message.content ?? '';
    });
    const receipt = await ctx.tool('charge', { amount: 5 }, () => {
      ran.charge++;
      return `receipt-${ran.charge}`;
    }, { idempotent: false });
    const page = await ctx.tool('fetch', { url: 'https://example.test' }, () => {
      ran.fetch++;
      if (fetchBroken) throw new PermanentError('the fetch tool is broken');
      return 'page';
    });
    const text = await ctx.step('answer', () => {
      ran.answer++;
      return `${plan} / ${receipt} / ${page}`;
    });
    return { answer: text };
  },
});

/** Charges (non-idempotent), then fails until fixed; input `early` fails before the charge. */
let bulkFixed = false;
let bulkCharges = 0;
const chargesThenFails = defineAgent({
  name: 'ops-bulk',
  async run(ctx) {
    if (ctx.input.content === 'early' && !bulkFixed) throw new PermanentError('fails before charging');
    await ctx.tool('charge', { amount: 1 }, () => ++bulkCharges, { idempotent: false });
    if (!bulkFixed) throw new PermanentError('fails after charging');
    return { answer: 'charged' };
  },
});

beforeAll(async () => {
  fake = await startFakeOpenAI();
  track(fake, () => fake.close());
  fake.script('#rerun', [answer('the plan')]);
  h = await useHarness();
  const api = await h.startApi();
  apiUrl = api.url;
  acme = await h.client(api.url, 'acme');
  await h.startWorker({ agents: [fourSteps, chargesThenFails] });
});

/** The ids of every run of a listing, page by page through its cursors; no id twice. */
async function listAll(c: ScopeClient, path: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const page: { status: number; body: { runs: { id: string }[]; nextCursor: string | null } } =
      await c.get(`${path}${cursor ? `&cursor=${cursor}` : ''}`);
    expect(page.status).toBe(200);
    ids.push(...page.body.runs.map((r) => r.id));
    cursor = page.body.nextCursor;
  } while (cursor);
  expect(new Set(ids).size).toBe(ids.length);
  return ids;
}

describe('re-run from a step', () => {
  it('a run whose third step failed succeeds re-run from it once the tool is fixed, without running the first two again', async () => {
    const first = (await acme.submit('rerun-1', 'buy it', { agent: 'ops-four-steps' })).body.id as string;
    const failed = await acme.waitStatus(first, ['succeeded', 'failed'], 20_000);
    expect(failed.status).toBe('failed');
    expect(ran).toEqual({ plan: 1, charge: 1, fetch: 1, answer: 0 });
    expect(fake.requestsFor('#rerun')).toHaveLength(1);
    const steps = (await acme.get(`/runs/${first}/steps`)).body.steps.map((s: any) => [s.key, s.status]);
    // The failed fetch stored nothing: an idempotent step leaves no trace until its result.
    expect(steps).toEqual([['infer:plan:1', 'done'], ['tool:charge:1', 'done']]);

    // Across the completed non-idempotent charge: refused, naming it, and nothing made.
    for (const body of [{}, { fromStep: 'tool:charge:1' }]) {
      const refused = await acme.post(`/runs/${first}/rerun`, body);
      expect(refused.status).toBe(409);
      expect(refused.body.error.code).toBe('RERUN_NON_IDEMPOTENT');
      expect(refused.body.error.details).toEqual([{ path: 'body.allowNonIdempotent', message: expect.stringContaining('tool:charge:1') }]);
    }
    expect((await acme.get('/runs?sessionId=rerun-1')).body.runs).toHaveLength(1);

    // Allowing it is an operator's call: a client key may not.
    const client = await h.client(apiUrl, 'acme', 'client');
    expect((await client.post(`/runs/${first}/rerun`, { allowNonIdempotent: true })).body.error).toMatchObject({
      code: 'FORBIDDEN', details: [{ path: 'body.allowNonIdempotent' }],
    });

    fetchBroken = false;
    const accepted = await acme.post(`/runs/${first}/rerun`, { fromStep: 'tool:fetch:1' });
    expect(accepted.status).toBe(202);
    expect(accepted.body).toMatchObject({ rerunOf: first, rerunFrom: 'tool:fetch:1', sessionId: 'rerun-1', agent: 'ops-four-steps' });
    expect(accepted.body.rerunNonIdempotent).toBeUndefined();
    const rerun = await acme.waitStatus(accepted.body.id, ['succeeded', 'failed'], 20_000);
    expect(rerun.status).toBe('succeeded');
    // The plan and the charge came from the copy: neither the provider nor the charge was called again.
    expect(rerun.result.answer).toBe('the plan / receipt-1 / page');
    expect(ran).toEqual({ plan: 1, charge: 1, fetch: 2, answer: 1 });
    expect(fake.requestsFor('#rerun')).toHaveLength(1);
    expect(rerun.input).toEqual(failed.input);
    expect((await acme.get(`/runs/${first}`)).body.reruns).toEqual([accepted.body.id]);

    // The copy is the re-run's own: the original's steps are as they were.
    const after = (await acme.get(`/runs/${first}/steps`)).body.steps.map((s: any) => s.key);
    expect(after).toEqual(['infer:plan:1', 'tool:charge:1']);
  });

  it('with allowNonIdempotent the re-run from the start runs the charge again and says so', async () => {
    const before = { ...ran };
    const done = (await acme.get('/runs?sessionId=rerun-1')).body.runs.find((r: any) => r.status === 'succeeded');
    const accepted = await acme.post(`/runs/${done.id}/rerun`, { allowNonIdempotent: true, input: { content: 'buy it again' } });
    expect(accepted.status).toBe(202);
    expect(accepted.body).toMatchObject({ rerunOf: done.id, rerunNonIdempotent: ['tool:charge:1'], input: { content: 'buy it again' } });
    const rerun = await acme.waitStatus(accepted.body.id, ['succeeded', 'failed'], 20_000);
    expect(rerun).toMatchObject({ status: 'succeeded', rerunNonIdempotent: ['tool:charge:1'] });
    expect(ran).toEqual({ plan: before.plan + 1, charge: before.charge + 1, fetch: before.fetch + 1, answer: before.answer + 1 });
    // A succeeded run ran every step it has: a step it never stored is none of its steps.
    expect((await acme.post(`/runs/${done.id}/rerun`, { fromStep: 'tool:nope:1' })).body.error.code).toBe('STEP_NOT_FOUND');
  });

  it('a re-run with an idempotency key is made once; the key with another request is refused', async () => {
    const id = (await acme.submit('rerun-idem', 'hello', { agent: 'echo' })).body.id as string;
    expect((await acme.waitStatus(id, ['succeeded'])).status).toBe('succeeded');
    const first = await acme.post(`/runs/${id}/rerun`, { idempotencyKey: 'again-1' });
    const replay = await acme.post(`/runs/${id}/rerun`, { idempotencyKey: 'again-1' });
    expect([first.status, replay.status]).toEqual([202, 200]);
    expect(replay.body.id).toBe(first.body.id);
    expect((await acme.post(`/runs/${id}/rerun`, { idempotencyKey: 'again-1', input: { content: 'other' } })).body.error.code)
      .toBe('IDEMPOTENCY_MISMATCH');
    expect((await acme.waitStatus(first.body.id, ['succeeded'])).result.answer).toBe('hello');
    expect((await acme.get(`/runs/${id}`)).body.reruns).toEqual([first.body.id]);
  });

  it('a run names its newest 10 re-runs (its GET stops growing), counts them all, and the listing by rerunOf gives each once', async () => {
    const initech = await h.client(apiUrl, 'initech');
    const original = (await initech.submit('rerun-many', 'again and again', { agent: 'echo' })).body.id as string;
    expect((await initech.waitStatus(original, ['succeeded'])).status).toBe('succeeded');
    const made: string[] = [];
    const sizes: number[] = [];
    for (let i = 1; i <= 24; i++) {
      const res = await initech.post(`/runs/${original}/rerun`, {});
      expect(res.status).toBe(202);
      made.push(res.body.id as string);
      const got = (await initech.get(`/runs/${original}`)).body;
      sizes.push(Buffer.byteLength(JSON.stringify(got)));
      expect(got.reruns).toEqual(made.slice(-10));
      expect(got.rerunCount).toBe(i);
    }
    // Past the 10th the GET is the same size however many more there are (run ids are of one length).
    console.log(`a run's GET after 1, 10 and 24 re-runs: ${sizes[0]}, ${sizes[9]}, ${sizes[23]} bytes`);
    expect(new Set(sizes.slice(9)).size).toBe(1);
    expect(sizes[9]).toBeGreaterThan(sizes[0]);
    // The record holds 10 ids; the index holds all 24.
    const sk = h.keys.scope('initech');
    expect((await h.redis.hget(sk.run(original), 'reruns'))!.split(' ')).toHaveLength(10);
    expect(await h.redis.zcard(sk.reruns(original))).toBe(24);
    // The index expires with the run's record.
    expect(await h.redis.pttl(sk.reruns(original))).toBeGreaterThan(0);

    // Every re-run once, newest first, over pages of 7; not the run itself.
    const listed = await listAll(initech, `/runs?rerunOf=${original}&limit=7`);
    expect(listed).toEqual([...made].reverse());
    for (const id of made) expect((await initech.waitStatus(id, ['succeeded'])).status).toBe('succeeded');
  });

  it('a run an earlier version re-ran (every id in `reruns`, no count, no index) shows its newest 10, lists all, and is indexed at its next re-run', async () => {
    const initech = await h.client(apiUrl, 'initech');
    const original = (await initech.submit('rerun-old', 'from before', { agent: 'echo' })).body.id as string;
    expect((await initech.waitStatus(original, ['succeeded'])).status).toBe('succeeded');
    const made: string[] = [];
    for (let i = 0; i < 13; i++) made.push((await initech.post(`/runs/${original}/rerun`, {})).body.id as string);
    // As the earlier version left it: the whole list in the field, nothing else.
    const sk = h.keys.scope('initech');
    await h.redis.del(sk.reruns(original));
    await h.redis.hdel(sk.run(original), 'rerunCount');
    await h.redis.hset(sk.run(original), 'reruns', made.join(' '));
    const shown = (await initech.get(`/runs/${original}`)).body;
    expect([shown.reruns, shown.rerunCount]).toEqual([made.slice(-10), 13]);
    expect(await listAll(initech, `/runs?rerunOf=${original}&limit=5`)).toEqual([...made].reverse());

    // The next re-run (this version) moves the field's ids into the index and bounds the field.
    made.push((await initech.post(`/runs/${original}/rerun`, {})).body.id as string);
    expect(await h.redis.zcard(sk.reruns(original))).toBe(14);
    expect((await h.redis.hget(sk.run(original), 'reruns'))!.split(' ')).toEqual(made.slice(-10));
    const after = (await initech.get(`/runs/${original}`)).body;
    expect([after.reruns, after.rerunCount]).toEqual([made.slice(-10), 14]);
    expect(await listAll(initech, `/runs?rerunOf=${original}&limit=5`)).toEqual([...made].reverse());
    for (const id of made) expect((await initech.waitStatus(id, ['succeeded'])).status).toBe('succeeded');
  });

  it('a run that has not ended is not re-run', async () => {
    const queued = (await acme.submit('rerun-busy', 'a', { agent: 'echo', delayMs: 60_000 })).body.id as string;
    expect((await acme.post(`/runs/${queued}/rerun`, {})).body.error.code).toBe('RUN_NOT_FINISHED');
    expect((await acme.post('/runs/rnosuchrun/rerun', {})).status).toBe(404);
  });
});

describe('bulk re-run of failed runs', () => {
  const operationDone = (id: string) => waitFor(async () => {
    const op = (await acme.get(`/operations/${id}`)).body;
    return op.status === 'done' ? op : undefined;
  }, 20_000, `operation ${id} done`);

  it('re-runs the failed runs the filter matches; one across a completed non-idempotent step counts as failed, naming it, until allowed', async () => {
    const early = (await acme.submit('bulk-early', 'early', { agent: 'ops-bulk' })).body.id as string;
    const late = (await acme.submit('bulk-late', 'late', { agent: 'ops-bulk' })).body.id as string;
    for (const id of [early, late]) expect((await acme.waitStatus(id, ['succeeded', 'failed'])).status).toBe('failed');
    expect(bulkCharges).toBe(1);
    bulkFixed = true;

    const made = await acme.post('/runs/rerun', { filter: { agent: 'ops-bulk', status: ['failed'] } });
    expect(made.status, JSON.stringify(made.body)).toBe(202);
    const op = await operationDone(made.body.id);
    expect(op).toMatchObject({ matched: 2, done: 1, failed: 1, lastError: { runId: late, code: 'RERUN_NON_IDEMPOTENT' } });
    expect(op.lastError.message).toContain('tool:charge:1');
    const [rerun] = (await acme.get(`/runs/${early}`)).body.reruns as string[];
    expect((await acme.waitStatus(rerun, ['succeeded', 'failed'])).status).toBe('succeeded');
    expect((await acme.get(`/runs/${late}`)).body.reruns ?? []).toEqual([]);
    expect(bulkCharges).toBe(2);

    // Allowed: the late run is re-run, and charges again.
    const allowed = await acme.post('/runs/rerun', { filter: { sessionId: 'bulk-late', status: ['failed'] }, allowNonIdempotent: true });
    expect(await operationDone(allowed.body.id)).toMatchObject({ matched: 1, done: 1, failed: 0 });
    const [lateRerun] = (await acme.get(`/runs/${late}`)).body.reruns as string[];
    expect((await acme.waitStatus(lateRerun, ['succeeded', 'failed'])).status).toBe('succeeded');
    expect(bulkCharges).toBe(3);
  });
});

describe('fork a session', () => {
  const turns = async (session: string) =>
    (await acme.get(`/sessions/${session}/messages`)).body.messages.filter((m: any) => m.role === 'user').map((m: any) => m.content);
  const turn = async (session: string, content: string) => {
    const id = (await acme.submit(session, content, { agent: 'echo' })).body.id as string;
    expect((await acme.waitStatus(id, ['succeeded', 'failed'])).status).toBe('succeeded');
    return id;
  };

  it('a fork at turn 2 of 4 holds turns 1-2; later commits on each side show on that side only', async () => {
    const ids: string[] = [];
    for (const t of ['t1', 't2', 't3', 't4']) ids.push(await turn('fork-src', t));
    const forked = await acme.post('/sessions/fork-src/fork', { atTurn: 2, sessionId: 'fork-dst' });
    expect(forked.status).toBe(201);
    expect(forked.body).toEqual({ sessionId: 'fork-dst', forkedFrom: 'fork-src', turns: 2, messages: 4, atRunId: ids[1] });
    expect(await turns('fork-dst')).toEqual(['t1', 't2']);
    expect(await turns('fork-src')).toEqual(['t1', 't2', 't3', 't4']);

    await turn('fork-dst', 'only in the fork');
    await turn('fork-src', 'only in the original');
    expect(await turns('fork-dst')).toEqual(['t1', 't2', 'only in the fork']);
    expect(await turns('fork-src')).toEqual(['t1', 't2', 't3', 't4', 'only in the original']);

    // By run id, into a session named for it; the fork's target must be new.
    const byRun = await acme.post('/sessions/fork-src/fork', { atRunId: ids[2] });
    expect(byRun.status).toBe(201);
    expect(byRun.body).toMatchObject({ forkedFrom: 'fork-src', turns: 3, messages: 6, atRunId: ids[2] });
    expect(await turns(byRun.body.sessionId)).toEqual(['t1', 't2', 't3']);
    expect((await acme.post('/sessions/fork-src/fork', { atTurn: 1, sessionId: 'fork-dst' })).body.error.code).toBe('SESSION_EXISTS');
    expect((await acme.post('/sessions/fork-src/fork', { atTurn: 9 })).body.error.code).toBe('TURN_NOT_FOUND');
    expect((await acme.post('/sessions/fork-src/fork', { atRunId: 'rnosuchrun' })).body.error.code).toBe('TURN_NOT_FOUND');
    expect((await acme.post('/sessions/fork-src/fork', { atTurn: 1, atRunId: ids[0] })).body.error.code).toBe('VALIDATION_FAILED');
  });
});

/** Runs `baton <args>` against this file's API as scope acme; resolves with its exit code and output. */
async function runCli(args: string[]): Promise<CliResult> {
  return runBaton(args, { BATON_URL: apiUrl, BATON_API_KEY: await h.key('acme', 'client'), BATON_SCOPE: 'acme' });
}

describe('the client and the CLI', () => {
  it('re-run and fork through BatonClient and `baton rerun` / `baton fork`', async () => {
    const baton = new BatonClient({ url: apiUrl, apiKey: await h.key('acme', 'client'), scope: 'acme' });
    const first = await baton.submit({ sessionId: 'cli-ops', input: { content: 'one' }, runtime: h.runtime, agent: 'ops-four-steps' });
    const done = await acme.waitStatus(first.id, ['succeeded', 'failed'], 20_000);
    expect(done.status).toBe('succeeded');
    await expect(baton.rerun(first.id)).rejects.toMatchObject({ status: 409, code: 'RERUN_NON_IDEMPOTENT' });
    const again = await baton.rerun(first.id, { fromStep: 'tool:fetch:1' });
    expect(again).toMatchObject({ rerunOf: first.id, rerunFrom: 'tool:fetch:1', sessionId: 'cli-ops' });
    expect((await acme.waitStatus(again.id, ['succeeded', 'failed'], 20_000)).status).toBe('succeeded');
    const forked = await baton.fork('cli-ops', { atTurn: 1, sessionId: 'cli-ops-fork' });
    expect(forked).toEqual({ sessionId: 'cli-ops-fork', forkedFrom: 'cli-ops', turns: 1, messages: 2, atRunId: first.id });

    const refused = await runCli(['rerun', first.id]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('RERUN_NON_IDEMPOTENT');
    expect(refused.stderr).toContain('tool:charge:1');
    const cliRerun = await runCli(['rerun', first.id, '--from', 'tool:fetch:1', '--tail']);
    expect(cliRerun.code, cliRerun.stderr).toBe(0);
    expect(cliRerun.stdout).toContain('the plan /');
    const cliFork = await runCli(['fork', 'cli-ops', '--at-run', first.id, '--to', 'cli-ops-fork-2']);
    expect(cliFork.code, cliFork.stderr).toBe(0);
    expect(cliFork.stdout.trim()).toBe('cli-ops-fork-2');
    expect((await runCli(['fork', 'cli-ops'])).code).toBe(2);
    expect((await acme.get('/sessions/cli-ops-fork-2/messages')).body.messages.map((m: any) => m.content)).toEqual(
      (await acme.get('/sessions/cli-ops/messages')).body.messages.slice(0, 2).map((m: any) => m.content),
    );
  }, CLI_TEST_TIMEOUT_MS);
});
