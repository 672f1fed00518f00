import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, type Agent } from '../src/lib/sdk/agent.ts';
import { TransientError } from '../src/lib/sdk/errors.ts';
import { redisMemory, type AssembleRequest, type HistoryMessage, type MemorySession } from '../src/lib/sessions/memory-session.ts';
import { RedisMemorySession } from '../src/lib/sessions/redis-store.ts';
import type { SessionMessage } from '../src/lib/transitions/record.ts';
import { slidingWindow, withSlidingWindow } from '../src/lib/sessions/sliding-window.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { probe, seen } from './fixtures/session-agents.ts';

/**
 * MemorySession: the runtime prefers assemble over load and append over save; custom
 * stores commit with turnId = runId; the sliding window; ctx.history / input / memory.
 * The custom stores here live in the test process: a store is the agent author's code.
 */

/** A custom store that keeps sessions in memory and records which methods the runtime called. */
class RecordingStore {
  readonly sessions = new Map<string, HistoryMessage[]>();
  readonly calls: { session: string; method: string; arg?: unknown }[] = [];
  /** turnIds append has stored (its idempotency record). */
  readonly turns = new Set<string>();
  /** Number of appends to fail after storing (the reply "lost" on the way back). */
  failAfterStoring = 0;

  open(kind: 'plain' | 'assemble' | 'forkable'): (s: { sessionId: string }) => MemorySession {
    return ({ sessionId }) => {
      const get = () => this.sessions.get(sessionId) ?? [];
      const store: MemorySession = {
        load: async () => { this.calls.push({ session: sessionId, method: 'load' }); return get(); },
        save: async (all) => { this.calls.push({ session: sessionId, method: 'save', arg: all }); this.sessions.set(sessionId, [...all]); },
      };
      if (kind === 'forkable') {
        // The source's messages through the last one of that run's turn, replacing what this session held.
        store.fork = async (from) => {
          this.calls.push({ session: sessionId, method: 'fork', arg: from });
          const source = this.sessions.get(from.sessionId) ?? [];
          const end = source.map((m) => m.runId).lastIndexOf(from.throughRunId);
          this.sessions.set(sessionId, source.slice(0, end + 1));
        };
      }
      if (kind === 'assemble') {
        store.assemble = async (req: AssembleRequest) => {
          this.calls.push({ session: sessionId, method: 'assemble', arg: req });
          // A store may already hold this run's turn (stored, then the finish was lost): it knows by runId.
          const earlier = get().filter((m) => m.runId !== req.runId);
          return [{ role: 'system', content: `summary of ${earlier.length} messages` }, ...get().slice(-2)];
        };
        store.append = async (messages: SessionMessage[], { turnId }) => {
          this.calls.push({ session: sessionId, method: 'append', arg: { messages, turnId } });
          if (!this.turns.has(turnId)) {
            this.turns.add(turnId);
            this.sessions.set(sessionId, [...get(), ...messages]);
          }
          if (this.failAfterStoring > 0) {
            this.failAfterStoring--;
            throw new TransientError('store timed out after writing', 'FX_STORE_TIMEOUT');
          }
        };
      }
      return store;
    };
  }

  methods(session: string): string[] {
    return this.calls.filter((c) => c.session === session).map((c) => c.method);
  }
}

const store = new RecordingStore();
const views = new Map<string, HistoryMessage[]>();
const answerWithHistory = (name: string, memory: Agent['memory']) =>
  defineAgent({
    name,
    memory,
    run(ctx) {
      views.set(ctx.runId, structuredClone([...ctx.history]));
      ctx.emit(`re: ${ctx.input.content}`);
      return `re: ${ctx.input.content}`;
    },
  });

const agents = [
  answerWithHistory('mem-plain', store.open('plain')),
  answerWithHistory('mem-assemble', store.open('assemble')),
  answerWithHistory('mem-fork', store.open('forkable')),
  answerWithHistory('mem-window', redisMemory({ window: { maxMessages: 3 } })),
  probe,
];

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({ agents });
  acme = await h.client(api.url, 'acme', 'client');
});

async function turn(sessionId: string, agent: string, content: string, extra: Record<string, unknown> = {}) {
  const sub = await acme.submit(sessionId, content, { agent, ...extra });
  expect(sub.status).toBe(202);
  return acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
}

const pairs = (msgs: HistoryMessage[]) => msgs.map((m) => [m.role, m.content]);

describe('custom stores', () => {
  it('a fork at a run whose turn a custom store holds: a store with fork() copies it at the fork\'s first run, once; one without starts empty', async () => {
    const src: { id: string }[] = [];
    for (const t of ['one', 'two', 'three']) src.push(await turn('fk-src', 'mem-fork', t));
    // The built-in history holds none of these turns: a fork by turn finds none, one by run id is at that run.
    expect((await acme.post('/sessions/fk-src/fork', { atTurn: 1 })).body.error.code).toBe('TURN_NOT_FOUND');
    const forked = await acme.post('/sessions/fk-src/fork', { atRunId: src[1].id, sessionId: 'fk-dst' });
    expect(forked.status).toBe(201);
    expect(forked.body).toEqual({ sessionId: 'fk-dst', forkedFrom: 'fk-src', turns: 0, messages: 0, atRunId: src[1].id });
    expect(store.methods('fk-dst')).toEqual([]);

    const first = await turn('fk-dst', 'mem-fork', 'in the fork');
    expect(pairs(views.get(first.id)!)).toEqual([['user', 'one'], ['assistant', 're: one'], ['user', 'two'], ['assistant', 're: two']]);
    const second = await turn('fk-dst', 'mem-fork', 'again');
    expect(pairs(views.get(second.id)!).map(([, c]) => c)).toEqual(['one', 're: one', 'two', 're: two', 'in the fork', 're: in the fork']);
    expect(store.calls.filter((c) => c.session === 'fk-dst' && c.method === 'fork').map((c) => c.arg))
      .toEqual([{ sessionId: 'fk-src', throughRunId: src[1].id }]);
    // The source keeps its own turns only.
    expect(store.sessions.get('fk-src')!.map((m) => m.content)).toEqual(['one', 're: one', 'two', 're: two', 'three', 're: three']);

    // A store without fork(): the fork's first run finds it empty there.
    const plain = [await turn('fk-plain', 'mem-plain', 'kept elsewhere')];
    expect((await acme.post('/sessions/fk-plain/fork', { atRunId: plain[0].id, sessionId: 'fk-plain-dst' })).status).toBe(201);
    const there = await turn('fk-plain-dst', 'mem-plain', 'hello');
    expect(there.status).toBe('succeeded');
    expect(views.get(there.id)).toEqual([]);
    // A run of another session, or one not ended, is no place to fork at.
    expect((await acme.post('/sessions/fk-plain/fork', { atRunId: src[0].id })).body.error.code).toBe('TURN_NOT_FOUND');
  });

  it('load and save are used when the store has neither assemble nor append', async () => {
    const r1 = await turn('plain', 'mem-plain', 'first');
    const r2 = await turn('plain', 'mem-plain', 'second');
    expect([r1.status, r2.status]).toEqual(['succeeded', 'succeeded']);
    expect(store.methods('plain')).toEqual(['load', 'load', 'save', 'load', 'load', 'save']);
    expect(pairs(views.get(r1.id)!)).toEqual([]);
    expect(pairs(views.get(r2.id)!)).toEqual([['user', 'first'], ['assistant', 're: first']]);
    const saved = store.sessions.get('plain')!;
    expect(saved.map((m) => [m.role, m.content, m.runId])).toEqual([
      ['user', 'first', r1.id], ['assistant', 're: first', r1.id], ['user', 'second', r2.id], ['assistant', 're: second', r2.id],
    ]);
    // The built-in store was not written: this agent's history lives in its own store.
    expect((await acme.get('/sessions/plain/messages')).body.messages).toEqual([]);
  });

  it('assemble and append are preferred when present; append gets the turn with turnId = runId', async () => {
    const r1 = await turn('asm', 'mem-assemble', 'one');
    const r2 = await turn('asm', 'mem-assemble', 'two', { memory: { tier: 'gold' } });
    expect(store.methods('asm')).toEqual(['assemble', 'append', 'assemble', 'append']);
    const [, append1, assemble2, append2] = store.calls.filter((c) => c.session === 'asm');
    expect((append1.arg as any).turnId).toBe(r1.id);
    expect((append2.arg as any).turnId).toBe(r2.id);
    expect((append2.arg as any).messages.map((m: SessionMessage) => [m.role, m.content, m.runId])).toEqual([
      ['user', 'two', r2.id], ['assistant', 're: two', r2.id],
    ]);
    // assemble sees the turn about to run (input, caller memory) and its answer is ctx.history as is.
    expect(assemble2.arg).toMatchObject({ scope: 'acme', sessionId: 'asm', runId: r2.id, input: { content: 'two' }, memory: { tier: 'gold' } });
    expect(pairs(views.get(r2.id)!)).toEqual([['system', 'summary of 2 messages'], ['user', 'one'], ['assistant', 're: one']]);
    // Caller memory is context, never stored.
    expect(JSON.stringify([...store.sessions.get('asm')!])).not.toContain('gold');
  });

  it('an append that stored the turn but failed is retried with the same turnId: the turn is stored once', async () => {
    store.failAfterStoring = 1;
    const run = await turn('asm-retry', 'mem-assemble', 'only once', { maxAttempts: 3 });
    expect(run.status).toBe('succeeded');
    expect(run.attempt).toBe(2);
    const appends = store.calls.filter((c) => c.session === 'asm-retry' && c.method === 'append');
    expect(appends.map((c) => (c.arg as any).turnId)).toEqual([run.id, run.id]);
    expect(pairs(store.sessions.get('asm-retry')!)).toEqual([['user', 'only once'], ['assistant', 're: only once']]);
    // The second attempt's context did not contain its own, already stored, turn (the store
    // returned it among the last two messages; the runtime dropped it by runId).
    expect(pairs(views.get(run.id)!)).toEqual([['system', 'summary of 0 messages']]);
  });
});

describe('the built-in Redis store', () => {
  it('with a sliding window hands the agent the newest messages and keeps the whole history', async () => {
    let last: any;
    for (const c of ['a', 'b', 'c']) last = await turn('win', 'mem-window', c);
    expect(pairs(views.get(last.id)!)).toEqual([['assistant', 're: a'], ['user', 'b'], ['assistant', 're: b']]);
    expect((await acme.get('/sessions/win/messages')).body.messages).toHaveLength(6);
  });

  it('load and save round-trip a history', async () => {
    const s = new RedisMemorySession(h.redis, h.keys.scope('acme').messages('direct'));
    const msgs: HistoryMessage[] = [{ role: 'user', content: 'x', runId: 'r1', createdAt: 1 }, { role: 'assistant', content: 'y' }];
    await s.save(msgs);
    expect(await s.load()).toEqual(msgs);
    await s.save([]);
    expect(await s.load()).toEqual([]);
  });
});

describe('context for the agent', () => {
  it('ctx.history holds the committed history without the new input; ctx.input is the new message', async () => {
    await turn('ctx', 'probe', 'hello');
    const second = await turn('ctx', 'probe', 'again');
    const view = seen.get(second.id)!;
    expect(view.input).toEqual({ content: 'again' });
    expect(pairs(view.history)).toEqual([['user', 'hello'], ['assistant', 'ok hello']]);
    expect(view.memory).toBeUndefined();
  });

  it('ctx.memory is the caller memory, any JSON value; it is never written into the session', async () => {
    const values: unknown[] = [{ plan: 'pro', facts: ['likes tea'] }, 42, 'a string', false, [1, 2], 0, ''];
    for (const [i, value] of values.entries()) {
      const run = await turn('callermem', 'probe', `value ${i}`, { memory: value });
      expect(seen.get(run.id)!.memory).toEqual(value);
      expect(run.memory).toBeUndefined();
    }
    const raw = await h.redis.lrange(h.keys.scope('acme').messages('callermem'), 0, -1);
    expect(raw).toHaveLength(values.length * 2);
    expect(raw.join('\n')).not.toContain('likes tea');
  });

  it('explicit null caller memory is 400 CALLER_MEMORY_INVALID and creates nothing', async () => {
    const res = await acme.submit('callermem-null', 'hi', { agent: 'probe', memory: null });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('CALLER_MEMORY_INVALID');
    expect(res.body.error.details[0].path).toBe('body.memory');
    expect((await acme.get('/runs?sessionId=callermem-null')).body.runs).toEqual([]);
  });
});

describe('sliding window', () => {
  const u = (c: string): HistoryMessage => ({ role: 'user', content: c });
  const a = (c: string): HistoryMessage => ({ role: 'assistant', content: c });
  const call = (id: string): HistoryMessage => ({ role: 'assistant', content: '', toolCalls: [{ id, name: 'f', arguments: '{}' }] });
  const result = (id: string, c = 'r'): HistoryMessage => ({ role: 'tool', content: c, toolCallId: id });

  it('keeps the last N messages', () => {
    expect(pairs(slidingWindow([u('1'), a('2'), u('3'), a('4')], { maxMessages: 3 }))).toEqual([['assistant', '2'], ['user', '3'], ['assistant', '4']]);
    expect(slidingWindow([u('1')], { maxMessages: 0 })).toEqual([]);
  });

  it('keeps what fits a character budget, newest first, without holes', () => {
    const h = [u('aaaa'), a('bb'), u('cccccc'), a('d')];
    expect(pairs(slidingWindow(h, { maxChars: 7 }))).toEqual([['user', 'cccccc'], ['assistant', 'd']]);
    // 'bb' would fit after 'cccccc' is skipped, but a window has no holes.
    expect(pairs(slidingWindow(h, { maxChars: 6 }))).toEqual([['assistant', 'd']]);
  });

  it('never splits a tool call from its results', () => {
    const h = [u('q'), call('t1'), result('t1'), result('t1', 'more'), a('answer')];
    // The last 3 messages would start in the middle of the tool unit: the unit goes whole.
    expect(pairs(slidingWindow(h, { maxMessages: 3 }))).toEqual([['assistant', 'answer']]);
    expect(slidingWindow(h, { maxMessages: 4 })).toEqual(h.slice(1));
  });

  it('property: the window is a suffix within both limits, and every tool call in it has its results', () => {
    const msg = fc.oneof(
      fc.string({ maxLength: 8 }).map(u),
      fc.string({ maxLength: 8 }).map(a),
      fc.tuple(fc.string({ minLength: 1, maxLength: 3 }), fc.integer({ min: 1, max: 3 }))
        .map(([id, n]) => [call(id), ...Array.from({ length: n }, () => result(id))]),
    );
    fc.assert(fc.property(
      fc.array(msg, { maxLength: 20 }).map((xs) => xs.flat()),
      fc.option(fc.integer({ min: 0, max: 12 }), { nil: undefined }),
      fc.option(fc.integer({ min: 0, max: 40 }), { nil: undefined }),
      (history, maxMessages, maxChars) => {
        fc.pre(maxMessages !== undefined || maxChars !== undefined);
        const w = slidingWindow(history, { maxMessages, maxChars });
        expect(history.slice(history.length - w.length)).toEqual(w);
        if (maxMessages !== undefined) expect(w.length).toBeLessThanOrEqual(maxMessages);
        const callChars = (m: (typeof w)[number]) => (m.toolCalls ?? []).reduce((k, c) => k + c.name.length + c.arguments.length, 0);
        const chars = w.reduce((n, m) => n + m.content.length + callChars(m), 0);
        if (maxChars !== undefined) expect(chars).toBeLessThanOrEqual(maxChars);
        if (w[0]) expect(w[0].role).not.toBe('tool');
        const cut = history.length - w.length;
        if (w.length && cut > 0 && history[cut - 1].toolCalls) throw new Error('a tool call was cut from its results');
      },
    ));
  });

  it('withSlidingWindow gives any store a windowed assemble', async () => {
    const all = [u('1'), a('2'), u('3'), a('4')];
    const base: MemorySession = { load: async () => all, save: async () => {} };
    const w = withSlidingWindow(base, { maxMessages: 2 });
    expect(pairs(await w.assemble!({} as AssembleRequest))).toEqual([['user', '3'], ['assistant', '4']]);
    expect(await w.load()).toBe(all);
    expect(w.append).toBeUndefined();
  });

  it('rejects a window without limits', () => {
    expect(() => slidingWindow([], {})).toThrow(/maxMessages/);
    expect(() => slidingWindow([], { maxMessages: -1 })).toThrow(/non-negative/);
  });
});
