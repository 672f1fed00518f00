import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, type Agent } from '../src/lib/sdk/agent.ts';
import { redisMemory, type HistoryMessage } from '../src/lib/sessions/memory-session.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * A run's claim reads what its agent's memory keeps, not what the session holds: the newest
 * HISTORY_READ_MAX messages for the whole-history store, `window.maxMessages` for a window
 * (even past HISTORY_READ_MAX), and the stored history stays whole.
 */
const READ_MAX = 20;
const views = new Map<string, HistoryMessage[]>();
const seeing = (name: string, memory?: Agent['memory']): Agent =>
  defineAgent({
    name,
    ...(memory ? { memory } : {}),
    run(ctx) {
      views.set(ctx.runId, [...ctx.history]);
      return `re: ${ctx.input.content}`;
    },
  });

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({
    env: { HISTORY_READ_MAX: String(READ_MAX) },
    agents: [seeing('hist-all'), seeing('hist-window', redisMemory({ window: { maxMessages: 30 } }))],
  });
  acme = await h.client(api.url, 'acme', 'client');
});

/** A session of `turns` committed turns, written into the built-in store's list. */
async function seed(sessionId: string, turns: number): Promise<string[]> {
  const texts: string[] = [];
  const rows: string[] = [];
  for (let i = 0; i < turns; i++) {
    for (const role of ['user', 'assistant']) {
      const content = `${role} ${i}`;
      texts.push(content);
      rows.push(JSON.stringify({ role, content, runId: `rseed${i}`, createdAt: i }));
    }
  }
  await h.redis.rpush(h.keys.scope('acme').messages(sessionId), ...rows);
  return texts;
}

async function historySeen(sessionId: string, agent: string): Promise<string[]> {
  const sub = await acme.submit(sessionId, 'next', { agent });
  expect(sub.status).toBe(202);
  const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
  expect(run.status).toBe('succeeded');
  return views.get(run.id)!.map((m) => m.content as string);
}

describe('the history a claim reads', () => {
  it('the whole-history store hands the agent the newest HISTORY_READ_MAX messages, oldest first', async () => {
    const texts = await seed('long', 50);
    expect(await historySeen('long', 'hist-all')).toEqual(texts.slice(-READ_MAX));
    // Stored history is untouched: 100 seeded messages and the new turn.
    expect(await h.redis.llen(h.keys.scope('acme').messages('long'))).toBe(102);
  });

  it('a window of maxMessages reads that many, past HISTORY_READ_MAX too', async () => {
    const texts = await seed('windowed', 50);
    expect(await historySeen('windowed', 'hist-window')).toEqual(texts.slice(-30));
  });

  it('a session shorter than the bound is read whole', async () => {
    const texts = await seed('short', 3);
    expect(await historySeen('short', 'hist-all')).toEqual(texts);
  });
});
