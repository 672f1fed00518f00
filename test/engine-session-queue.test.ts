import { beforeAll, describe, expect, it } from 'vitest';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import type { Submissions } from '../src/lib/engine/submissions.ts';
import type { Gateways } from '../src/lib/transitions/gateways.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { doorOf } from './helpers/submit.ts';

/**
 * A session's head looks at the session's queue when it ends only if a run was queued behind
 * it (its record's `behind`, transitions/lib/sessions.lua queuedBehind): every way a run joins the queue marks
 * the head, and a record written before the mark was kept still hands its session on. No
 * worker runs here; the test claims and finishes runs itself.
 */
let h: Harness;
let door: Submissions;
let t: Gateways;
const scope = 'sq';

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0' });
  t = h.gateways();
  door = doorOf(h, { transitions: t.api });
});

const submit = async (sessionId: string, content: string, extra: Record<string, unknown> = {}) =>
  (await door.submit({ scope, runtime: h.runtime, agent: 'echo', sessionId, input: { content }, ...extra })).run;
const status = async (runId: string) => (await h.redis.hget(h.keys.scope(scope).run(runId), 'status'));

/** Claims and succeeds a dispatched run, as a worker would. */
async function runToEnd(runId: string): Promise<void> {
  const c = await t.worker.claim({ scope, runId }, 'w', {}, {});
  if (c.kind !== 'claimed') throw new Error(`claim of ${runId}: ${c.kind}`);
  await t.worker.of(new Attempt(c.run, c.fence, h.keys.scope(scope))).finish({ status: 'succeeded', result: '{"answer":"ok","finishReason":"stop","toolCallsSeen":0}' });
}

describe("a session's queue", () => {
  it('hands the session to each run queued behind, in order, and a head nothing queued behind ends without looking', async () => {
    const a = await submit('s1', 'a');
    expect(await h.redis.hget(h.keys.scope(scope).run(a.id), 'behind')).toBe('0');
    const b = await submit('s1', 'b');
    const c = await submit('s1', 'c');
    expect(await h.redis.hget(h.keys.scope(scope).run(a.id), 'behind')).toBe('1');
    await runToEnd(a.id);
    expect(await status(b.id)).toBe('dispatched');
    // c still waits behind b: b is marked when it becomes the head.
    expect(await h.redis.hget(h.keys.scope(scope).run(b.id), 'behind')).toBe('1');
    await runToEnd(b.id);
    expect(await status(c.id)).toBe('dispatched');
    expect(await h.redis.hget(h.keys.scope(scope).run(c.id), 'behind')).toBe('0');
    await runToEnd(c.id);
    expect(await h.redis.hget(h.keys.scope(scope).session('s1'), 'active')).toBeNull();
    const d = await submit('s1', 'd');
    expect(d.status).toBe('dispatched');
  });

  it('marks the head for a scheduled run that comes due behind it and for an interrupting one', async () => {
    const a = await submit('s2', 'a');
    const later = await submit('s2', 'later', { delayMs: 50 });
    await new Promise((r) => setTimeout(r, 80));
    expect(await t.sweeper.runDue(scope, later.id)).toBe(true);
    expect(await status(later.id)).toBe('queued');
    expect(await h.redis.hget(h.keys.scope(scope).run(a.id), 'behind')).toBe('1');
    await runToEnd(a.id);
    expect(await status(later.id)).toBe('dispatched');

    const urgent = await submit('s2', 'urgent', { multitask: 'interrupt' });
    // The head was dispatched, not running: the interrupt cancelled it and the urgent run took over.
    expect(await status(later.id)).toBe('cancelled');
    expect(await status(urgent.id)).toBe('dispatched');
  });
});
