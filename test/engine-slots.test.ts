import { beforeAll, describe, expect, it } from 'vitest';
import { Attempt } from '../src/lib/engine/attempt.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { RunStore } from '../src/lib/engine/store.ts';
import { Sweeper } from '../src/lib/engine/sweeper.ts';
import type { Transitions } from '../src/lib/engine/transitions.ts';
import { createLogger } from '../src/lib/logger.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * A scope's slots (MAX_ACTIVE_PER_SCOPE): a run's end gives the slot it frees to the oldest
 * parked session head, and looks for one only when every slot was taken (lua/lib.lua
 * finishRun). Runs parked under a lower limit than a process runs with are given the free
 * slots by the sweeper. No worker runs here; the test claims and finishes runs itself.
 */
let h: Harness;
const scope = 'slots';

beforeAll(async () => {
  h = await useHarness({ SWEEP_INTERVAL_MS: '0', SUBMIT_RATE_PER_SEC: '0', MAX_ACTIVE_PER_SCOPE: '1' });
});

const status = (runId: string) => h.redis.hget(h.keys.scope(scope).run(runId), 'status');

async function runToEnd(t: Transitions, runId: string): Promise<void> {
  const c = await t.claim({ scope, runId }, 'w', {}, {});
  if (c.kind !== 'claimed') throw new Error(`claim of ${runId}: ${c.kind}`);
  await t.finish(new Attempt(c.run, c.fence, h.keys.scope(scope)), { status: 'succeeded', result: '{"answer":"ok","finishReason":"stop","toolCallsSeen":0}' });
}

describe('scope slots', () => {
  it('a full scope hands a freed slot on at the end; runs parked under a lower limit get slots from the sweeper', async () => {
    const one = h.transitions();
    const store = new RunStore(h.redis, h.keys, h.config, one);
    const submit = async (sessionId: string) =>
      (await store.submit({ scope, runtime: h.runtime, agent: 'echo', sessionId, input: { content: sessionId } })).run;
    const [a, b, c, d] = [await submit('a'), await submit('b'), await submit('c'), await submit('d')];
    expect([a.status, b.status, c.status, d.status]).toEqual(['dispatched', 'queued', 'queued', 'queued']);

    await runToEnd(one, a.id);
    expect([await status(b.id), await status(c.id), await status(d.id)]).toEqual(['dispatched', 'queued', 'queued']);

    // A process with a limit of 3 ends b: the scope was not full by its limit, so it hands
    // nothing on; its sweeper does.
    const limit3 = { ...h.config, MAX_ACTIVE_PER_SCOPE: 3 };
    const three = h.transitions({ MAX_ACTIVE_PER_SCOPE: '3' });
    await runToEnd(three, b.id);
    expect([await status(c.id), await status(d.id)]).toEqual(['queued', 'queued']);
    const dispatcher = new Dispatcher(h.redis, h.keys);
    track(dispatcher, () => dispatcher.close());
    const sweeper = new Sweeper(h.redis, h.keys, limit3, dispatcher, three, createLogger('silent'));
    await sweeper.sweep();
    expect([await status(c.id), await status(d.id)]).toEqual(['dispatched', 'dispatched']);
    expect(await h.redis.llen(h.keys.scope(scope).ready)).toBe(0);
    expect(await h.redis.hget(h.keys.scope(scope).meta, 'active')).toBe('2');
  });
});
