import { Queue } from 'bullmq';
import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { FIXTURE, fx, fxList, fxSet, runEvents, statuses } from './helpers/engine.ts';
import { tokenText } from './helpers/http.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { parseRunRecord } from '../src/lib/transitions/record.ts';
import { LeaseLostError } from '../src/lib/transitions/script-codes.ts';
import { track } from './helpers/resources.ts';

/**
 * Invariants 3 and 4 with real processes: a worker killed mid-run is replaced by another
 * worker that resumes the run from its memoized steps; a worker paused past its lease can
 * write nothing once it comes back.
 */
let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme');
});

describe('crash recovery', () => {
  it('a SIGKILLed worker is replaced: memoized steps are not repeated, the takeover is visible', async () => {
    const a = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A' } });
    const sub = await acme.submit('kill-1', 'survive a crash', { agent: 'fx-memo' });
    expect(sub.status).toBe(202);
    const runId = sub.body.id as string;
    // Two steps done, the agent waits inside the run: the moment to pull the plug.
    expect(await waitFor(() => fx(h, runId, 'reached'), 20_000, 'worker A to finish two steps')).toBe('A');
    const b = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'B' } });

    const killedAt = Date.now();
    await a.kill('SIGKILL');
    await fxSet(h, runId, 'go');
    const recovered = await waitFor(
      async () => (await runEvents(h, 'acme', runId)).find((e) => e.type === 'status' && e.data.status === 'recovered'),
      20_000, 'the recovered status event',
    );
    console.log(
      `[engine-recovery] SIGKILL -> resumed (recovered event) after ${recovered.at - killedAt} ms ` +
      `(LEASE_MS ${h.config.LEASE_MS}, SWEEP_INTERVAL_MS ${h.config.SWEEP_INTERVAL_MS})`,
    );

    const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 20_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 1 });
    expect(run.result.answer).toBe('one=1 two=1 three=1 by B');
    // Each step's side effect happened exactly once across both workers.
    expect([await fx(h, runId, 'one'), await fx(h, runId, 'two'), await fx(h, runId, 'three')]).toEqual(['1', '1', '1']);
    expect(await fx(h, runId, 'one-key')).toBe(`${runId}:step:one:1`);
    // The dead worker's job stalled; BullMQ redelivered it instead of failing it.
    const queue = new Queue('fx-memo', { connection: h.redis, prefix: h.keys.queuePrefix(h.runtime) });
    track(queue, () => queue.close());
    expect(await queue.getJobCounts('failed')).toEqual({ failed: 0 });

    const events = await runEvents(h, 'acme', runId);
    expect(statuses(events)).toEqual(['queued', 'running', 'recovered']);
    expect(recovered.data).toMatchObject({ attempt: 1, recoveries: 1 });
    expect(events.filter((e) => e.type === 'attempt').map((e) => e.data)).toEqual([
      { attempt: 1, maxAttempts: 3 },
      { attempt: 1, maxAttempts: 3, recovered: true },
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded' } });
    const msgs = (await acme.get('/sessions/kill-1/messages')).body.messages;
    expect(msgs.map((m: any) => [m.role, m.content])).toEqual([
      ['user', 'survive a crash'], ['assistant', 'one=1 two=1 three=1 by B'],
    ]);
    await b.close();
  });

  it('a worker paused past its lease writes nothing after another worker took the run over', async () => {
    const a = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A', LOG_LEVEL: 'warn' } });
    const sub = await acme.submit('stop-1', 'pause me', { agent: 'fx-stale' });
    const runId = sub.body.id as string;
    await waitFor(() => fx(h, runId, 'reached-A'), 20_000, 'worker A to start the run');
    a.process.kill('SIGSTOP');
    try {
      const b = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'B' } });
      await fxSet(h, runId, 'go');
      const run = await acme.waitStatus(runId, ['succeeded', 'failed'], 20_000);
      expect(run).toMatchObject({ status: 'succeeded', recoveries: 1, result: { answer: '[B] answer' } });
      await b.close();
    } finally {
      a.process.kill('SIGCONT');
    }

    // A wakes up inside its agent with a lease that is no longer its own.
    const outcome = await waitFor(async () => {
      const o = await fxList(h, runId, 'outcome-A');
      return o.length === 2 ? o : undefined;
    }, 20_000, 'worker A to try its writes');
    expect(outcome[1]).toMatch(/^step-refused:/);
    await waitFor(() => a.output().includes('lease lost; this attempt stops writing'), 20_000, 'worker A to give the run up');
    console.log(`[engine-recovery] paused worker after SIGCONT: ${outcome.join(', ')}`);

    const events = await runEvents(h, 'acme', runId);
    expect(events.some((e) => JSON.stringify(e.data).includes('[A]'))).toBe(false);
    expect(tokenText(events.map((e) => ({ id: e.id, event: e.type, data: e.data })))).toBe('[B] after the pause ');
    expect(events.filter((e) => e.type === 'end')).toHaveLength(1);
    expect(statuses(events)).toEqual(['queued', 'running', 'recovered']);
    const steps = await h.redis.hgetall(h.keys.scope('acme').steps(runId));
    expect(JSON.parse(steps['step:two:1'])).toMatchObject({ v: 'two by B' });
    expect(await fx(h, runId, 'one')).toBe('1');
    const final = (await acme.get(`/runs/${runId}`)).body;
    expect(final).toMatchObject({ status: 'succeeded', recoveries: 1, result: { answer: '[B] answer' } });
    const msgs = (await acme.get('/sessions/stop-1/messages')).body.messages;
    expect(msgs.map((m: any) => m.content)).toEqual(['pause me', '[B] answer']);
  });

  it('every fenced script refuses a stale fence', async () => {
    // The same refusal the paused worker met, checked script by script on a live run.
    const a = await h.startWorker();
    const sub = await acme.submit('fence-1', 'a b c d e f', { agent: 'echo', metadata: { delayMs: 300 } });
    const runId = sub.body.id as string;
    await acme.waitStatus(runId, ['running']);
    const sk = h.keys.scope('acme');
    const rk = sk.run(runId);
    const record = parseRunRecord(await h.redis.hgetall(rk))!;
    const fence = record.fence;
    const stale = new Attempt(record, fence - 1, sk);
    const t = h.gateways();
    const refused = (p: Promise<unknown>) => expect(p).rejects.toBeInstanceOf(LeaseLostError);
    expect(await t.worker.heartbeat([stale])).toEqual([{ kind: 'lost' }]);
    await refused(t.worker.append(stale, 1, [['token', '{"text":"stale"}']]));
    await refused(t.worker.of(stale).step({ op: 'done', stepKey: 'step:x:1', result: '{"v":1}' }));
    // The closing transitions answer the lost lease as a value (close.ts makes it lease-lost).
    const lost = (p: Promise<unknown>) => expect(p).resolves.toEqual({ kind: 'lost' });
    await lost(t.worker.of(stale).retry({ delayMs: 10, lastError: '{"code":"X","message":"x"}' }));
    await lost(t.worker.of(stale).release());
    await lost(t.worker.of(stale).block({ stepKey: 'step:x:1', reason: 'x', since: 1 }));
    await lost(t.worker.of(stale).finish({ status: 'succeeded', result: '{"answer":"stale","finishReason":"stop","toolCallsSeen":0}' }));
    // With the current fence, the first writer of a step result wins; a second write gets it back.
    const current = new Attempt(record, fence, sk);
    const first = await t.worker.of(current).step({ op: 'done', stepKey: 'step:y:1', result: '{"v":"first"}' });
    const second = await t.worker.of(current).step({ op: 'done', stepKey: 'step:y:1', result: '{"v":"second"}' });
    expect([first, second]).toEqual(['{"v":"first"}', '{"v":"first"}']);
    const run = await acme.waitStatus(runId, ['succeeded', 'failed']);
    expect(run.result.answer).toBe('a b c d e f');
    expect(await h.redis.hexists(sk.steps(runId), 'step:x:1')).toBe(0);
    await a.close();
  });
});
