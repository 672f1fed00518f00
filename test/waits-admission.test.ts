import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { closeWaitFixtureRedis, waitAgents } from './fixtures/wait-agents.ts';
import { sleep, useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * A resumed run is admitted like a session head: it needs a scope slot again
 * (MAX_ACTIVE_PER_SCOPE is 1 here) and a drain of its runtime parks it.
 */
let h: Harness;
let acme: ScopeClient;
let release!: () => void;
const released = new Promise<void>((r) => { release = r; });

const hold = defineAgent({
  name: 'hold',
  async run() {
    await released;
    return 'held the slot';
  },
});

beforeAll(async () => {
  h = await useHarness({ MAX_ACTIVE_PER_SCOPE: '1' });
  process.env.REDIS_URL = h.redisUrl;
  process.env.BATON_KEY_PREFIX = h.prefix;
  track(null, closeWaitFixtureRedis);
  const api = await h.startApi();
  await h.startWorker({ agents: [...waitAgents, hold] });
  acme = await h.client(api.url, 'acme', 'admin');
});

describe('admission after a resume', () => {
  it('waits for a free scope slot, and for the end of a drain', async () => {
    const asking = (await acme.submit('a-1', 'q', { agent: 'fx-ask' })).body;
    await acme.waitStatus(asking.id, ['waiting']);
    // The waiting run gave its slot up: another session's run takes it and keeps it.
    const holder = (await acme.submit('a-2', 'x', { agent: 'hold' })).body;
    await acme.waitStatus(holder.id, ['running']);
    expect((await acme.post(`/runs/${asking.id}/waits/wait:answer:1`, { value: 'go' })).status).toBe(200);
    // Not a timing claim: the slot is held, so the run cannot start however long it is given.
    await sleep(1000);
    expect((await acme.get(`/runs/${asking.id}`)).body.status).toBe('queued');
    release();
    expect((await acme.waitStatus(asking.id, ['succeeded'])).result.answer).toContain('got "go"');

    const second = (await acme.submit('a-3', 'q', { agent: 'fx-ask' })).body;
    await acme.waitStatus(second.id, ['waiting']);
    expect((await acme.post(`/runtimes/${h.runtime}/drain`, {})).status).toBe(200);
    expect((await acme.post(`/runs/${second.id}/waits/wait:answer:1`, { value: 'after the drain' })).status).toBe(200);
    await sleep(1000);
    expect((await acme.get(`/runs/${second.id}`)).body.status).toBe('queued');
    expect((await acme.del(`/runtimes/${h.runtime}/drain`)).status).toBe(200);
    const done = await acme.waitStatus(second.id, ['succeeded']);
    expect(done).toMatchObject({ attempt: 1, result: { answer: expect.stringContaining('got "after the drain"') } });
  });
});
