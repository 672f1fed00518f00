import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { closeWaitFixtureRedis, waitAgents } from './fixtures/wait-agents.ts';
import { fx, runEvents, statuses } from './helpers/engine.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * Invariant 11 in one process: a run waits for input, an approval or a timer holding no
 * worker, and each wait is delivered once. Runs go through a real API and in-process workers
 * on a real Redis; the fault cases (SIGKILL, a Redis restart, no process alive at a deadline)
 * are in waits-faults.test.ts and waits-processes.test.ts.
 */
let h: Harness;
let acme: ScopeClient;
let apiUrl: string;

beforeAll(async () => {
  h = await useHarness();
  process.env.REDIS_URL = h.redisUrl;
  process.env.BATON_KEY_PREFIX = h.prefix;
  track(null, closeWaitFixtureRedis);
  apiUrl = (await h.startApi()).url;
  await h.startWorker({ agents: waitAgents });
  acme = await h.client(apiUrl, 'acme', 'client');
});

const resume = (c: ScopeClient, runId: string, waitKey: string, value: unknown) =>
  c.post(`/runs/${runId}/waits/${encodeURIComponent(waitKey)}`, { value });

/** The run's record, steps and waits in Redis, each with a digest of its value. */
async function runState(runId: string): Promise<string[]> {
  const sk = h.keys.scope('acme');
  const out: string[] = [];
  for (const k of [sk.run(runId), sk.steps(runId), sk.waits(runId), sk.events(runId)]) {
    const dump = await h.redis.dumpBuffer(k);
    out.push(`${k} ${dump ? createHash('sha1').update(dump).digest('hex') : 'none'}`);
  }
  return out;
}

describe('a run that waits for input', () => {
  it('waits holding no lease, shows its wait, checks the value against the schema, and goes on with it once', async () => {
    const schema = { type: 'object', required: ['city'], properties: { city: { type: 'string', minLength: 2 } }, additionalProperties: false };
    const run = (await acme.submit('ask-1', 'where to?', { agent: 'fx-ask', metadata: { prompt: { question: 'Which city?' }, schema } })).body;
    const waiting = await acme.waitStatus(run.id, ['waiting']);
    expect(waiting.waits).toEqual([{
      key: 'wait:answer:1', kind: 'input', name: 'answer', prompt: { question: 'Which city?' }, schema,
      since: expect.any(String), token: expect.stringMatching(/^bwt_acme\.[A-Za-z0-9_-]{43}$/),
    }]);
    expect(Date.parse(waiting.waits[0].since)).toBeGreaterThan(0);
    const record = await h.redis.hgetall(h.keys.scope('acme').run(run.id));
    expect(record.leaseOwner).toBe('');
    expect(await h.redis.zscore(h.keys.scope('acme').leases, run.id)).toBeNull();
    expect(Number(await h.redis.hget(h.keys.scope('acme').meta, 'active') ?? 0)).toBe(0);
    // The status event carries the waits, without their tokens.
    const events = await runEvents(h, 'acme', run.id);
    const waitingEvent = events.find((e) => e.type === 'status' && e.data.status === 'waiting')!;
    expect(waitingEvent.data.waits).toEqual([expect.objectContaining({ key: 'wait:answer:1', kind: 'input', since: expect.any(Number) })]);
    expect(JSON.stringify(events)).not.toContain('bwt_');

    // Refusals write nothing: a value against the schema, a wait never declared, a bad key.
    const before = await runState(run.id);
    const bad = await resume(acme, run.id, 'wait:answer:1', { city: 'X', extra: true });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('VALIDATION_FAILED');
    expect(bad.body.error.details.map((d: any) => d.path)).toEqual(expect.arrayContaining(['body.value.city', 'body.value']));
    expect((await resume(acme, run.id, 'wait:other:1', { city: 'Oslo' })).body.error.code).toBe('WAIT_NOT_PENDING');
    expect((await resume(acme, run.id, 'wait:answer:2', { city: 'Oslo' })).status).toBe(409);
    expect((await resume(acme, run.id, 'step:before:1', { city: 'Oslo' })).status).toBe(400);
    expect((await acme.post(`/runs/${run.id}/waits/wait:answer:1`, {})).status).toBe(400);
    expect(await runState(run.id)).toEqual(before);

    const ok = await resume(acme, run.id, 'wait:answer:1', { city: 'Oslo' });
    expect(ok.status).toBe(200);
    expect(ok.body.waits).toBeUndefined();
    expect(['queued', 'running', 'succeeded']).toContain(ok.body.status);
    expect((await resume(acme, run.id, 'wait:answer:1', { city: 'Rome' })).body.error.code).toBe('WAIT_NOT_PENDING');
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed']);
    expect(done).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'asking; got {"city":"Oslo"} (before=1 after=1 by in-process)' } });
    expect(await fx(h, run.id, 'before')).toBe('1');
    const all = await runEvents(h, 'acme', run.id);
    expect(statuses(all)).toEqual(['queued', 'running', 'waiting', 'queued', 'running']);
    expect(all.find((e) => e.data?.wait)?.data.wait).toEqual({ key: 'wait:answer:1', outcome: 'resumed' });
    // The resumed attempt is the same attempt: the client restarts the answer at its `attempt` event.
    expect(all.filter((e) => e.type === 'attempt').map((e) => e.data)).toEqual([
      { attempt: 1, maxAttempts: 3 }, { attempt: 1, maxAttempts: 3, resumed: true },
    ]);
    const steps = (await acme.get(`/runs/${run.id}/steps`)).body.steps;
    expect(steps.map((s: any) => s.key)).toEqual(['step:before:1', 'wait:answer:1', 'step:after:1']);
    expect(steps[1]).toMatchObject({ kind: 'wait', status: 'done', value: { city: 'Oslo' } });
    const history = (await acme.get('/sessions/ask-1/messages')).body.messages;
    expect(history.map((m: any) => m.content)).toEqual(['where to?', done.result.answer]);
  });

  it('two waits at once, resumed in reverse order, each by its own key', async () => {
    const run = (await acme.submit('pair-1', 'both', { agent: 'fx-pair' })).body;
    const waiting = await acme.waitStatus(run.id, ['waiting']);
    expect(waiting.waits.map((w: any) => w.key)).toEqual(['wait:left:1', 'wait:right:1']);
    expect((await resume(acme, run.id, 'wait:right:1', 'R')).status).toBe(200);
    // The run goes on, reaches `left` again and waits on it alone; `right` is answered.
    await waitFor(async () => {
      const r = (await acme.get(`/runs/${run.id}`)).body;
      return r.status === 'waiting' && r.waits?.length === 1 && r.waits[0].key === 'wait:left:1';
    }, 15_000, 'the run to wait on the left wait alone');
    expect((await resume(acme, run.id, 'wait:right:1', 'again')).status).toBe(409);
    expect((await resume(acme, run.id, 'wait:left:1', 'L')).status).toBe(200);
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed']);
    expect(done.result.answer).toBe('L+R');
    expect(await fx(h, run.id, 'first')).toBe('1');
    expect(await fx(h, run.id, 'last')).toBe('1');
  });

  it('100 concurrent resumes of one wait: exactly one 200, the rest 409, and the run gets that one value', async () => {
    const run = (await acme.submit('race-1', 'race', { agent: 'fx-ask' })).body;
    await acme.waitStatus(run.id, ['waiting']);
    const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => resume(acme, run.id, 'wait:answer:1', i)));
    const won = answers.filter((a) => a.status === 200);
    expect(won).toHaveLength(1);
    expect(answers.filter((a) => a.status === 409).length).toBe(99);
    const winner = answers.indexOf(won[0]);
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed']);
    expect(done.result.answer).toContain(`got ${winner} `);
    expect(await fx(h, run.id, 'after')).toBe('1');
  });

  it('a wait whose timeout passes makes waitFor throw WaitTimeoutError, which the agent may catch', async () => {
    const run = (await acme.submit('timeout-1', 'late', { agent: 'fx-ask', metadata: { timeoutMs: 300 } })).body;
    const waiting = await acme.waitStatus(run.id, ['waiting', 'succeeded']);
    if (waiting.status === 'waiting') expect(Date.parse(waiting.waits[0].expiresAt)).toBeGreaterThan(Date.parse(waiting.waits[0].since));
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed']);
    expect(done.result.answer).toContain('got "timed out (wait:answer:1)"');
    expect((await resume(acme, run.id, 'wait:answer:1', 'too late')).body.error.code).toBe('WAIT_NOT_PENDING');
    const steps = (await acme.get(`/runs/${run.id}/steps`)).body.steps;
    expect(steps.find((s: any) => s.key === 'wait:answer:1')).toMatchObject({ kind: 'wait', timedOut: true, value: null });
    const events = await runEvents(h, 'acme', run.id);
    expect(events.find((e) => e.data?.wait)?.data.wait).toEqual({ key: 'wait:answer:1', outcome: 'timed-out' });
  });

  it('ctx.sleep leaves the worker and goes on when the time is up; a sleep cannot be resumed', async () => {
    const run = (await acme.submit('nap-1', 'nap', { agent: 'fx-nap', metadata: { ms: 1500 } })).body;
    const waiting = await acme.waitStatus(run.id, ['waiting']);
    expect(waiting.waits).toEqual([expect.objectContaining({ key: 'wait:sleep:1', kind: 'sleep', expiresAt: expect.any(String) })]);
    expect(waiting.waits[0].token).toBeUndefined();
    expect((await resume(acme, run.id, 'wait:sleep:1', null)).body.error.code).toBe('WAIT_NOT_PENDING');
    const done = await acme.waitStatus(run.id, ['succeeded', 'failed']);
    expect(done.result.answer).toBe('rested');
    expect(await fx(h, run.id, 'before')).toBe('1');
    expect(statuses(await runEvents(h, 'acme', run.id))).toEqual(['queued', 'running', 'waiting', 'queued', 'running']);
  });
});

describe('sub-agents', () => {
  it("a sub-agent's wait is named after it, like its steps", async () => {
    const run = (await acme.submit('sub-1', 'x', { agent: 'fx-delegate' })).body;
    const waiting = await acme.waitStatus(run.id, ['waiting']);
    expect(waiting.waits).toEqual([expect.objectContaining({ key: 'wait:helper.question:1', name: 'helper.question', kind: 'input' })]);
    expect((await resume(acme, run.id, 'wait:helper.question:1', 'yes')).status).toBe(200);
    expect((await acme.waitStatus(run.id, ['succeeded', 'failed'])).result.answer).toBe('helper heard yes');
    const steps = (await acme.get(`/runs/${run.id}/steps`)).body.steps.map((s: any) => s.key);
    expect(steps).toEqual(['wait:helper.question:1', 'step:helper.use:1']);
  });
});

describe('tool approval', () => {
  it('approved: the tool runs once; declined: it never runs and the agent gets ToolDeclinedError with the reason', async () => {
    const yes = (await acme.submit('ship-1', 'v1', { agent: 'fx-ship' })).body;
    const no = (await acme.submit('ship-2', 'v2', { agent: 'fx-ship' })).body;
    for (const id of [yes.id, no.id]) {
      const w = await acme.waitStatus(id, ['waiting']);
      expect(w.waits).toEqual([expect.objectContaining({
        key: 'wait:ship:1', kind: 'approval', name: 'ship', prompt: { to: 'prod', build: id === yes.id ? 'v1' : 'v2' },
        schema: expect.objectContaining({ required: ['approved'] }),
      })]);
    }
    expect((await resume(acme, yes.id, 'wait:ship:1', { approved: 'yes' })).status).toBe(400);
    expect((await resume(acme, yes.id, 'wait:ship:1', { approved: true })).status).toBe(200);
    expect((await resume(acme, no.id, 'wait:ship:1', { approved: false, reason: 'not on a Friday' })).status).toBe(200);
    expect((await acme.waitStatus(yes.id, ['succeeded', 'failed'])).result).toMatchObject({ answer: 'shipped v1', toolCallsSeen: 1 });
    expect((await acme.waitStatus(no.id, ['succeeded', 'failed'])).result.answer).toBe('not shipped: not on a Friday');
    expect(await fx(h, yes.id, 'shipped')).toBe('1');
    expect(await fx(h, no.id, 'shipped')).toBeNull();
  });

  it('the resume token works once without a key, then answers 409; altered or foreign tokens answer 404', async () => {
    const run = (await acme.submit('ship-3', 'v3', { agent: 'fx-ship' })).body;
    const token: string = (await acme.waitStatus(run.id, ['waiting'])).waits[0].token;
    const byToken = (t: string, value: unknown) => call(apiUrl, 'POST', `/v1/waits/${encodeURIComponent(t)}`, { value });
    // Foreign and altered tokens open nothing, and look like a token that never existed.
    const globex = await h.client(apiUrl, 'globex', 'client');
    const other = (await globex.submit('g-ship', 'g1', { agent: 'fx-ship' })).body;
    const globexToken: string = (await globex.waitStatus(other.id, ['waiting'])).waits[0].token;
    const before = await runState(run.id);
    const forged = [
      token.replace('bwt_acme.', 'bwt_globex.'),
      globexToken.replace('bwt_globex.', 'bwt_acme.'),
      `${token.slice(0, -2)}${token.endsWith('AA') ? 'BB' : 'AA'}`,
      `bwt_acme.${'A'.repeat(43)}`,
    ];
    for (const t of forged) {
      const res = await byToken(t, { approved: true });
      expect(res.status, t).toBe(404);
      expect(res.body.error.code, t).toBe('NOT_FOUND');
    }
    expect((await byToken('not-a-token', { approved: true })).status).toBe(400);
    expect((await byToken(token, { approved: 'sure' })).status).toBe(400);
    // A key is not a token, nor the other way round.
    expect((await call(apiUrl, 'POST', `/v1/scopes/acme/runs/${run.id}/waits/wait:ship:1`, { value: { approved: true } }, { authorization: `Bearer ${token}` })).status).toBe(401);
    expect(await runState(run.id)).toEqual(before);

    const first = await byToken(token, { approved: true });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ runId: run.id, waitKey: 'wait:ship:1', resumed: true });
    const second = await byToken(token, { approved: false });
    expect(second.status).toBe(409);
    expect(second.body.error.code).toBe('WAIT_NOT_PENDING');
    expect((await acme.waitStatus(run.id, ['succeeded', 'failed'])).result.answer).toBe('shipped v3');
    // Used once, and still refused after the run ended (kept for the run's retention).
    expect((await byToken(token, { approved: true })).status).toBe(409);
    // globex's own token still works on its own run.
    expect((await byToken(globexToken, { approved: false, reason: 'no' })).status).toBe(200);
    expect((await globex.waitStatus(other.id, ['succeeded'])).result.answer).toBe('not shipped: no');
  });

  it('a key of another scope cannot see or resume a wait: 404 as for a missing run', async () => {
    const run = (await acme.submit('ship-4', 'v4', { agent: 'fx-ship' })).body;
    await acme.waitStatus(run.id, ['waiting']);
    const globex = await h.client(apiUrl, 'globex', 'admin');
    const res = await call(apiUrl, 'POST', `/v1/scopes/acme/runs/${run.id}/waits/wait:ship:1`, { value: { approved: true } }, globex.headers);
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('NOT_FOUND');
    const own = await resume(globex, run.id, 'wait:ship:1', { approved: true });
    expect(own.status).toBe(404);
    expect(own.body.error.code).toBe('RUN_NOT_FOUND');
    expect((await acme.get(`/runs/${run.id}`)).body.status).toBe('waiting');
    await resume(acme, run.id, 'wait:ship:1', { approved: false });
    await acme.waitStatus(run.id, ['succeeded']);
  });
});

describe('sessions, delays and deadlines', () => {
  it('a waiting run keeps its session: later turns queue behind it in order; interrupt cancels it', async () => {
    const head = (await acme.submit('fifo-1', 'first', { agent: 'fx-ask' })).body;
    await acme.waitStatus(head.id, ['waiting']);
    const second = (await acme.submit('fifo-1', 'second')).body;
    const third = (await acme.submit('fifo-1', 'third')).body;
    // Another session's run is not held up by the waiting one.
    const elsewhere = (await acme.submit('fifo-other', 'elsewhere')).body;
    expect((await acme.waitStatus(elsewhere.id, ['succeeded'])).result.answer).toBe('elsewhere');
    for (const r of [second, third]) expect((await acme.get(`/runs/${r.id}`)).body.status).toBe('queued');
    await resume(acme, head.id, 'wait:answer:1', 'go');
    const runs = await Promise.all([head, second, third].map((r) => acme.waitStatus(r.id, ['succeeded'])));
    expect(Date.parse(runs[1].startedAt)).toBeGreaterThanOrEqual(Date.parse(runs[0].finishedAt));
    expect(Date.parse(runs[2].startedAt)).toBeGreaterThanOrEqual(Date.parse(runs[1].finishedAt));
    const history = (await acme.get('/sessions/fifo-1/messages')).body.messages;
    expect(history.filter((m: any) => m.role === 'user').map((m: any) => m.content)).toEqual(['first', 'second', 'third']);

    const waiting = (await acme.submit('fifo-2', 'will be interrupted', { agent: 'fx-ask' })).body;
    await acme.waitStatus(waiting.id, ['waiting']);
    // The record says the run waited, so its end drops the waits and lets the token expire.
    const sk = h.keys.scope('acme');
    expect(await h.redis.hget(sk.run(waiting.id), 'waited')).toBe('1');
    const tokenSha = await h.redis.hget(sk.waits(waiting.id), 'wait:answer:1#token');
    expect(await h.redis.pttl(sk.waitToken(tokenSha!))).toBe(-1);
    const interrupting = (await acme.submit('fifo-2', 'now', { multitask: 'interrupt' })).body;
    expect((await acme.waitStatus(waiting.id, ['cancelled'])).waits).toBeUndefined();
    expect(await h.redis.exists(sk.waits(waiting.id))).toBe(0);
    expect(await h.redis.pttl(sk.waitToken(tokenSha!))).toBeGreaterThan(0);
    // A run that never waited says so (its finish looks for no waits).
    expect(await h.redis.hget(sk.run(interrupting.id), 'waited')).toBe('0');
    expect((await acme.waitStatus(interrupting.id, ['succeeded'])).result.answer).toBe('now');
    expect((await resume(acme, waiting.id, 'wait:answer:1', 'late')).body.error.code).toBe('WAIT_NOT_PENDING');
  });

  it('runAt and delayMs: scheduled until due, then queued in the session like a new run', async () => {
    const later = (await acme.submit('sched-1', 'later', { delayMs: 1200 })).body;
    expect(later.status).toBe('scheduled');
    expect(Date.parse(later.runAt)).toBeGreaterThan(Date.parse(later.createdAt));
    // Not due yet: the session is free for a run submitted after it.
    const now = (await acme.submit('sched-1', 'now')).body;
    expect((await acme.waitStatus(now.id, ['succeeded'])).status).toBe('succeeded');
    expect((await acme.get(`/runs/${later.id}`)).body.status).toBe('scheduled');
    const done = await acme.waitStatus(later.id, ['succeeded']);
    expect(Date.parse(done.startedAt)).toBeGreaterThanOrEqual(Date.parse(later.runAt));
    expect(statuses(await runEvents(h, 'acme', later.id))).toEqual(['scheduled', 'queued', 'running']);

    const at = new Date(Date.now() + 1000).toISOString();
    const byTime = (await acme.submit('sched-2', 'at a time', { runAt: at })).body;
    expect(byTime).toMatchObject({ status: 'scheduled', runAt: at });
    expect((await acme.waitStatus(byTime.id, ['succeeded'])).result.answer).toBe('at a time');
    const cancelled = (await acme.submit('sched-3', 'never', { delayMs: 60_000 })).body;
    expect((await acme.post(`/runs/${cancelled.id}/cancel`, {})).body.status).toBe('cancelled');

    for (const bad of [{ runAt: at, delayMs: 5 }, { delayMs: 5, multitask: 'reject' }, { runAt: 'tomorrow' }, { delayMs: -1 }, { ttlMs: 0 }]) {
      const res = await acme.submit('sched-4', 'x', bad);
      expect(res.status, JSON.stringify(bad)).toBe(400);
    }
  });

  it('ttlMs: a run that does not start in time ends expired; the session goes on', async () => {
    const head = (await acme.submit('ttl-1', 'holds the session', { agent: 'fx-ask' })).body;
    await acme.waitStatus(head.id, ['waiting']);
    const stale = (await acme.submit('ttl-1', 'too late to matter', { ttlMs: 500 })).body;
    const next = (await acme.submit('ttl-1', 'after it')).body;
    const expired = await acme.waitStatus(stale.id, ['expired', 'succeeded']);
    expect(expired).toMatchObject({ status: 'expired', lastError: { code: 'EXPIRED' }, result: { finishReason: 'expired' } });
    expect(expired.startedAt).toBeUndefined();
    await resume(acme, head.id, 'wait:answer:1', 'fine');
    expect((await acme.waitStatus(next.id, ['succeeded'])).result.answer).toBe('after it');
    const history = (await acme.get('/sessions/ttl-1/messages')).body.messages;
    expect(history.filter((m: any) => m.role === 'user').map((m: any) => m.content)).toEqual(['holds the session', 'after it']);
    // A run that starts in time is not affected.
    expect((await acme.waitStatus((await acme.submit('ttl-2', 'quick', { ttlMs: 60_000 })).body.id, ['succeeded'])).status).toBe('succeeded');
  });

  it('timeoutMs: at its end the running code is stopped and the run fails with TIMEOUT, the partial answer committed; waiting does not count', async () => {
    const run = (await acme.submit('budget-1', 'work', { agent: 'fx-busy', timeoutMs: 800 })).body;
    const failed = await acme.waitStatus(run.id, ['failed', 'succeeded']);
    expect(failed).toMatchObject({ status: 'failed', timeoutMs: 800, lastError: { code: 'TIMEOUT' }, result: { answer: 'partial answer', finishReason: 'timeout' } });
    const history = (await acme.get('/sessions/budget-1/messages')).body.messages;
    expect(history).toEqual([
      expect.objectContaining({ role: 'user', content: 'work' }),
      expect.objectContaining({ role: 'assistant', content: 'partial answer', incomplete: true }),
    ]);
    const events = await runEvents(h, 'acme', run.id);
    expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'failed', error: { code: 'TIMEOUT' } } });

    // A budget far shorter than the wait: the run still gets its answer.
    const patient = (await acme.submit('budget-2', 'ask', { agent: 'fx-ask', timeoutMs: 1000 })).body;
    await acme.waitStatus(patient.id, ['waiting']);
    await new Promise((r) => setTimeout(r, 2000));
    expect((await acme.get(`/runs/${patient.id}`)).body.status).toBe('waiting');
    await resume(acme, patient.id, 'wait:answer:1', 'later');
    expect((await acme.waitStatus(patient.id, ['succeeded', 'failed'])).status).toBe('succeeded');
  });
});
