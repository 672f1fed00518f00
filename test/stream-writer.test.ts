import { createServer, connect, type AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { Appender } from '../src/lib/streams/appender.ts';
import { EventWriter, MAX_TOKEN_EVENT_CHARS } from '../src/lib/streams/writer.ts';
import { parseNotification, type LiveBatch } from '../src/lib/streams/log.ts';
import { createRedis, waitReady, type Redis } from '../src/lib/redis/redis.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import { Dispatcher } from '../src/lib/engine/dispatcher.ts';
import { LeaseLostError } from '../src/lib/transitions/script-codes.ts';
import { gateways } from '../src/lib/transitions/gateways.ts';
import { track } from './helpers/resources.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { fullLog } from './helpers/stream-check.ts';

const TOKENS = 2000;

/** A model far faster than Redis: 2,000 tokens, yielding to the event loop only every 10. */
const burst = defineAgent({
  name: 'burst',
  async run(ctx) {
    let answer = '';
    for (let i = 0; i < TOKENS; i++) {
      const t = `t${i} `;
      answer += t;
      ctx.emit(t);
      if (i % 10 === 9) await new Promise((r) => setImmediate(r));
    }
    return answer;
  },
});

/** A steady stream: a token every millisecond or so for 300 tokens. */
const steady = defineAgent({
  name: 'steady',
  async run(ctx) {
    let answer = '';
    for (let i = 0; i < 300; i++) {
      const t = `s${i} `;
      answer += t;
      ctx.emit(t);
      await sleep(1);
    }
    return answer;
  },
});

/** Two speakers in one burst: the run's agent says `A`s, its sub-agent `b`s, in runs of three. */
const duet = defineAgent({
  name: 'duet',
  async run(ctx) {
    const helper = ctx.subagent('helper');
    let said = '';
    for (let i = 0; i < 300; i++) {
      const [who, t] = Math.floor(i / 3) % 2 === 0 ? [ctx, 'A'] : [helper, 'b'];
      said += t;
      who.emit(t);
      if (i % 10 === 9) await new Promise((r) => setImmediate(r));
    }
    return said;
  },
});

let h: Harness;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness({ EMIT_FLUSH_MS: '15', EMIT_FLUSH_TOKENS: '64' });
  const api = await h.startApi();
  await h.startWorker({ agents: [burst, steady, duet] });
  acme = await h.client(api.url, 'acme', 'client');
});

async function tokenEventsOf(runId: string) {
  const log = await fullLog(h, 'acme', runId);
  const tokens = log.filter((e) => e.type === 'token').map((e) => (e.data as { text: string }).text);
  return { log, tokens };
}

describe('token coalescing', () => {
  it('a burst of 2,000 tokens becomes a few dozen events, in order, nothing lost', async () => {
    const sub = await acme.submit('burst', 'go', { agent: 'burst' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect(run.status).toBe('succeeded');
    const { tokens } = await tokenEventsOf(sub.body.id);
    expect(tokens.join('')).toBe(run.result.answer);
    // At most one event per EMIT_FLUSH_TOKENS tokens, plus one per flush interval of the run.
    const seconds = (Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000;
    const bound = Math.ceil(TOKENS / 64) + Math.ceil((seconds * 1000) / 15) + 2;
    console.log(`burst: ${TOKENS} tokens → ${tokens.length} token events in ${seconds.toFixed(3)} s (bound ${bound})`);
    expect(tokens.length).toBeLessThanOrEqual(bound);
    expect(tokens.length).toBeLessThan(TOKENS / 10);
  });

  it('a steady stream is written every EMIT_FLUSH_MS, not per token', async () => {
    const sub = await acme.submit('steady', 'go', { agent: 'steady' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect(run.status).toBe('succeeded');
    const { tokens } = await tokenEventsOf(sub.body.id);
    expect(tokens.join('')).toBe(run.result.answer);
    const ms = Date.parse(run.finishedAt) - Date.parse(run.startedAt);
    const bound = Math.ceil(300 / 64) + Math.ceil(ms / 15) + 2;
    console.log(`steady: 300 tokens over ${ms} ms → ${tokens.length} token events (${(tokens.length / (ms / 1000)).toFixed(0)} writes/s; bound ${bound})`);
    expect(tokens.length).toBeLessThanOrEqual(bound);
    expect(tokens.length).toBeLessThan(300);
  });

  it('merges only consecutive tokens of one agent and role, so every event says who said it', async () => {
    const sub = await acme.submit('duet', 'go', { agent: 'duet' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect(run.status).toBe('succeeded');
    const tokens = (await fullLog(h, 'acme', sub.body.id)).filter((e) => e.type === 'token').map((e) => e.data as any);
    expect(tokens.map((t) => t.text).join('')).toBe(run.result.answer);
    for (const t of tokens) {
      expect([t.agent, t.role]).toEqual(t.text.startsWith('A') ? ['duet', 'assistant'] : ['helper', 'assistant']);
      expect(t.text).toMatch(/^(A+|b+)$/);
    }
    // Runs of three alternate 100 times: at least that many events, and merging still happened.
    expect(tokens.length).toBeGreaterThanOrEqual(100);
    expect(tokens.length).toBeLessThan(300);
  });
});

describe('append script', () => {
  /** A run record that looks held by fence 1, enough for the fenced append. */
  /** A run record held by a pretend worker under fence 1, and that worker's attempt. */
  async function fakeRunning(runId: string, fence = 1): Promise<Attempt> {
    const sk = h.keys.scope('acme');
    await h.redis.hset(sk.run(runId), { status: 'running', fence: '1', leaseOwner: 'test-worker' });
    return new Attempt({ id: runId, scope: 'acme', sessionId: 's', runtime: h.runtime }, fence, sk);
  }

  /** The scope's notifications from now on, parsed, in the order they arrive. */
  async function notifications(): Promise<Map<string, LiveBatch>[]> {
    const sub = createRedis({ url: h.redisUrl, name: 'test-append-sub', blocking: true });
    track(sub, () => sub.quit());
    const messages: Map<string, LiveBatch>[] = [];
    sub.on('message', (_ch: string, msg: string) => messages.push(parseNotification(msg)));
    await sub.subscribe(h.keys.scope('acme').live);
    return messages;
  }

  const token = (text: string): [string, string][] => [['token', JSON.stringify({ text })]];

  it('a token event carries at most MAX_TOKEN_EVENT_CHARS: a huge emit and tokens piled up behind a write are cut, never inside a surrogate pair', async () => {
    const runId = `big-${h.prefix}`;
    const attempt = await fakeRunning(runId);
    const writer = new EventWriter({
      transitions: h.gateways().worker, attempt, flushMs: 1000, flushTokens: 1_000_000,
      onLeaseLost: () => { throw new Error('the lease cannot be lost here'); },
    });
    // An emoji is a surrogate pair: placed so that plain cuts would fall inside one.
    const emoji = '\u{1F600}';
    const huge = `${'a'.repeat(MAX_TOKEN_EVENT_CHARS - 1)}${emoji}${'b'.repeat(2 * MAX_TOKEN_EVENT_CHARS)}`;
    let sent = '';
    const emit = (t: string) => { sent += t; writer.token(t); };
    emit('start ');
    emit(huge);
    for (let i = 0; i < 100; i++) emit(`${'c'.repeat(4095)}${i % 7 === 0 ? emoji : 'd'}`);
    await writer.flush();
    writer.close();
    const texts = (await fullLog(h, 'acme', runId)).map((e) => (e.data as { text: string }).text);
    expect(texts.join('')).toBe(sent);
    expect(texts.length).toBeGreaterThanOrEqual(Math.ceil(sent.length / MAX_TOKEN_EVENT_CHARS));
    for (const t of texts) {
      expect(t.length).toBeLessThanOrEqual(MAX_TOKEN_EVENT_CHARS);
      expect(t.length).toBeGreaterThan(0);
      // Each event's text is well-formed on its own: no half of a pair at either end.
      expect(t.charCodeAt(t.length - 1) >= 0xd800 && t.charCodeAt(t.length - 1) <= 0xdbff).toBe(false);
      expect(t.charCodeAt(0) >= 0xdc00 && t.charCodeAt(0) <= 0xdfff).toBe(false);
    }
  });

  it('one call appends several runs\' batches, each fenced and applied once, and publishes them in one message', async () => {
    const ids = ['many-a', 'many-b', 'many-c'].map((n) => `${n}-${h.prefix}`);
    const [a, b, c] = await Promise.all(ids.map((id) => fakeRunning(id)));
    const stale = new Attempt({ id: ids[2], scope: 'acme', sessionId: 's', runtime: h.runtime }, 0, h.keys.scope('acme'));
    const messages = await notifications();
    const t = h.gateways();
    expect(await t.worker.append(a, 1, token('a1'))).toBe('applied');
    const answers = await t.worker.appendMany([
      { attempt: a, batch: 1, events: token('a1') },
      { attempt: b, batch: 1, events: [...token('b1'), ['notice', '{"n":1}']] },
      { attempt: stale, batch: 1, events: token('x') },
      { attempt: c, batch: 1, events: token('c1') },
    ]);
    expect(answers.slice(0, 2)).toEqual(['duplicate', 'applied']);
    expect(answers[2]).toBeInstanceOf(LeaseLostError);
    expect(answers[3]).toBe('applied');
    const [logA, logB, logC] = await Promise.all(ids.map((id) => fullLog(h, 'acme', id)));
    expect(logA.map((e) => e.data)).toEqual([{ text: 'a1' }]);
    expect(logB.map((e) => e.type)).toEqual(['token', 'notice']);
    expect(logC.map((e) => e.data)).toEqual([{ text: 'c1' }]);
    await waitFor(() => messages.length >= 2, 5_000, 'two notifications');
    // The first append's, then one message with the two runs the second call wrote to.
    expect(messages.map((m) => [...m.keys()].sort())).toEqual([[ids[0]], [ids[1], ids[2]]]);
    expect(messages[1].get(ids[1])).toEqual({ prev: '0', events: logB.map((e) => ({ id: e.id, type: e.type, data: JSON.stringify(e.data) })) });
  });

  it('a run\'s batches that share a call: each applied once, in order, under one entry of the notification; a batch with no events is applied with no entry', async () => {
    const runId = `twice-${h.prefix}`;
    const a = await fakeRunning(runId);
    const messages = await notifications();
    const t = h.gateways();
    expect(await t.worker.append(a, 1, token('t1'))).toBe('applied');
    const before = (await fullLog(h, 'acme', runId)).at(-1)!.id;
    const answers = await t.worker.appendMany([
      { attempt: a, batch: 2, events: token('t2') },
      { attempt: a, batch: 2, events: token('t2') },
      { attempt: a, batch: 3, events: [...token('t3'), ['notice', '{"n":3}']] },
      { attempt: a, batch: 4, events: [] },
      { attempt: a, batch: 1, events: token('t1') },
    ]);
    expect(answers).toEqual(['applied', 'duplicate', 'applied', 'applied', 'duplicate']);
    const log = await fullLog(h, 'acme', runId);
    expect(log.map((e) => e.type === 'token' ? (e.data as { text: string }).text : e.type)).toEqual(['t1', 't2', 't3', 'notice']);
    expect(await h.redis.hmget(h.keys.scope('acme').run(runId), 'appendedBatch', 'logTail')).toEqual(['1:4', log.at(-1)!.id]);
    await waitFor(() => messages.length >= 2, 5_000, 'two notifications');
    expect(messages[1].get(runId)).toEqual({
      prev: before, events: log.slice(1).map((e) => ({ id: e.id, type: e.type, data: JSON.stringify(e.data) })),
    });
    // Batch 4 carried nothing: nothing more to announce, and batch 5 comes next.
    expect(await t.worker.append(a, 4, token('late'))).toBe('duplicate');
    expect(messages).toHaveLength(2);
  });

  it('the appender sends the batches of a scope\'s runs together: one call at a time, the rest in the next', async () => {
    const ids = Array.from({ length: 5 }, (_, i) => `gather-${i}-${h.prefix}`);
    const attempts = await Promise.all(ids.map((id) => fakeRunning(id)));
    const appender = new Appender(h.gateways().worker);
    // Made in one turn of the event loop: one call carries all five.
    expect(await Promise.all(attempts.map((a, i) => appender.append(a, 1, token(`t${i}`))))).toEqual(Array(5).fill('applied'));
    expect([appender.calls, appender.batches]).toEqual([1, 5]);
    // One call in flight: what comes meanwhile waits for it, then goes in one call.
    const first = appender.append(attempts[0], 2, token('u0'));
    await new Promise((r) => setImmediate(r));
    const rest = attempts.slice(1).map((a, i) => appender.append(a, 2, token(`u${i + 1}`)));
    await Promise.all([first, ...rest]);
    expect([appender.calls, appender.batches]).toEqual([3, 10]);
    for (const [i, id] of ids.entries()) expect((await fullLog(h, 'acme', id)).map((e) => e.data)).toEqual([{ text: `t${i}` }, { text: `u${i}` }]);
  });

  it('the token window widens with the writers open in the process: a lone run keeps its own, a busy process batches', async () => {
    const gateway = h.gateways().worker;
    const appender = new Appender(gateway, { maxMs: 40, fullAt: 101 });
    // The window from a writer's own 5 ms: linear in the writers open, 40 ms from 101 on.
    const windows: number[] = [];
    const opened = (n: number) => { for (let i = 0; i < n; i++) appender.opened(); };
    for (const n of [1, 50, 50, 100]) {
      opened(n);
      windows.push(appender.flushMs(5));
    }
    expect(windows).toEqual([5, 23, 40, 40]);
    for (let i = 0; i < 201; i++) appender.closed();
    expect(appender.flushMs(5)).toBe(5);
    // Writers count themselves: with 100 others open (the window is the process's), a writer's tokens wait for the widened
    // window (here 10 s, so no machine is slow enough to see it pass): the first goes at once
    // (the window is leading-edge), the next nine together when flushed.
    const wide = new Appender(gateway, { maxMs: 10_000, fullAt: 2 });
    for (let i = 0; i < 100; i++) wide.opened();
    const attempt = await fakeRunning(`widen-${h.prefix}`);
    const writer = new EventWriter({
      transitions: gateway, appender: wide, attempt, flushMs: 0, flushTokens: 64,
      onLeaseLost: () => { throw new Error('the lease cannot be lost here'); },
    });
    for (let i = 0; i < 10; i++) {
      writer.token(`w${i} `);
      await sleep(5);
    }
    expect(writer.writes).toBe(1);
    await writer.flush();
    expect(writer.writes).toBe(2);
    writer.close();
    const log = await fullLog(h, 'acme', attempt.runId);
    expect(log.map((e) => (e.data as { text: string }).text)).toEqual(['w0 ', Array.from({ length: 9 }, (_, i) => `w${i + 1} `).join('')]);
    // Closed, the writer no longer counts: the window is back to the writer's own for the next.
    for (let i = 0; i < 100; i++) wide.closed();
    expect(wide.flushMs(0)).toBe(0);
  });

  it('windows that end in one tick go in one call: a window\'s end is rounded up to the tick, and a wait stopped is not woken', async () => {
    const gateway = h.gateways().worker;
    // The widest window is 2 s, so a tick is 250 ms.
    const appender = new Appender(gateway, { maxMs: 2000, fullAt: 2 });
    const attempts: Attempt[] = [];
    for (let i = 0; i < 4; i++) attempts.push(await fakeRunning(`tick-${i}-${h.prefix}`));
    // A tick a second or more ahead; three window ends in the 250 ms up to it, one just after.
    const tick = (Math.ceil(Date.now() / 250) + 4) * 250;
    const ends = [tick - 249, tick - 100, tick, tick + 1];
    const woken: number[] = [];
    const written: Promise<unknown>[] = [];
    for (const [i, at] of ends.entries()) {
      appender.atTick(at, () => {
        woken.push(i);
        written.push(appender.append(attempts[i], 1, token(`w${i}`)));
      });
    }
    let stoppedWoken = false;
    const stop = appender.atTick(tick - 5, () => { stoppedWoken = true; });
    stop();
    await waitFor(() => woken.length === 4, 5_000);
    await Promise.all(written);
    // The first three in one call, the last in the next tick's.
    expect(woken).toEqual([0, 1, 2, 3]);
    expect([appender.calls, appender.batches, stoppedWoken]).toEqual([2, 4, false]);
    for (let i = 0; i < 4; i++) expect((await fullLog(h, 'acme', attempts[i].runId)).map((e) => e.data)).toEqual([{ text: `w${i}` }]);
  });

  it('a writer inside its window waits for the tick; one that flushes writes at once and leaves it', async () => {
    const gateway = h.gateways().worker;
    const appender = new Appender(gateway, { maxMs: 10_000, fullAt: 2 });
    const writers: EventWriter[] = [];
    for (let i = 0; i < 3; i++) {
      writers.push(new EventWriter({
        transitions: gateway, appender, attempt: await fakeRunning(`leave-${i}-${h.prefix}`), flushMs: 0, flushTokens: 64,
        onLeaseLost: () => { throw new Error('the lease cannot be lost here'); },
      }));
    }
    // First tokens: written at once (the window is leading-edge). Second tokens, inside the
    // 10 s window: they wait.
    for (const [i, w] of writers.entries()) w.token(`a${i} `);
    for (const w of writers) await w.flush();
    for (const [i, w] of writers.entries()) w.token(`b${i} `);
    await sleep(20);
    expect(writers.map((w) => w.writes)).toEqual([1, 1, 1]);
    const before = appender.calls;
    await writers[0].flush();
    expect(appender.calls - before).toBe(1);
    // The others' flushes in one turn share a call.
    await Promise.all([writers[1].flush(), writers[2].flush()]);
    expect([appender.calls - before, appender.batches]).toEqual([2, 6]);
    for (const w of writers) w.close();
    for (const [i, w] of writers.entries()) {
      expect((await fullLog(h, 'acme', w['o'].attempt.runId)).map((e) => e.data)).toEqual([{ text: `a${i} ` }, { text: `b${i} ` }]);
    }
  });

  it('applies a batch number once, publishes {prev, events} chained by id, and refuses a stale fence', async () => {
    const runId = `app-${h.prefix}`;
    const attempt = await fakeRunning(runId);
    const sub = createRedis({ url: h.redisUrl, name: 'test-append-sub', blocking: true });
    track(sub, () => sub.quit());
    const batches: LiveBatch[] = [];
    sub.on('message', (_ch: string, msg: string) => {
      const mine = parseNotification(msg).get(runId);
      if (mine) batches.push(mine);
    });
    await sub.subscribe(h.keys.scope('acme').live);

    const t = h.gateways();
    expect(await t.worker.append(attempt, 1, token('a'))).toBe('applied');
    expect(await t.worker.append(attempt, 1, token('a'))).toBe('duplicate');
    expect(await t.worker.append(attempt, 2, token('b'))).toBe('applied');
    const stale = new Attempt({ id: runId, scope: 'acme', sessionId: 's', runtime: h.runtime }, 0, h.keys.scope('acme'));
    await expect(t.worker.append(stale, 3, token('x'))).rejects.toBeInstanceOf(LeaseLostError);

    const log = await fullLog(h, 'acme', runId);
    expect(log.map((e) => e.data)).toEqual([{ text: 'a' }, { text: 'b' }]);
    await waitFor(() => batches.length >= 2, 5_000, 'two notifications');
    expect(batches).toEqual([
      { prev: '0', events: [{ id: log[0].id, type: 'token', data: '{"text":"a"}' }] },
      { prev: log[0].id, events: [{ id: log[1].id, type: 'token', data: '{"text":"b"}' }] },
    ]);
  });

  it('a write whose reply is lost (connection dropped after the script ran) is retried without duplicating tokens', async () => {
    const runId = `lost-${h.prefix}`;
    const attempt = await fakeRunning(runId);
    const proxy = await replyDroppingProxy(h.redisUrl, 3);
    const conn: Redis = createRedis({ url: proxy.url, name: `test-writer-${h.prefix}` });
    track(conn, () => conn.quit());
    await waitReady(conn);
    const writer = new EventWriter({
      transitions: gateways(conn, h.keys, h.config, new Dispatcher(conn, h.keys)).worker, attempt, flushMs: 2, flushTokens: 8,
      onLeaseLost: () => { throw new Error('the lease cannot be lost here'); },
    });
    let sent = '';
    for (let i = 0; i < 1500; i++) {
      const t = `k${i} `;
      sent += t;
      writer.token(t);
      if (i % 5 === 0) await sleep(1);
    }
    await waitFor(async () => {
      try {
        await writer.flush();
        return true;
      } catch {
        return false;
      }
    }, 30_000, 'the writer to catch up');
    writer.close();
    const text = (await fullLog(h, 'acme', runId)).map((e) => (e.data as { text: string }).text).join('');
    console.log(`writer: ${proxy.dropped} replies dropped after the script ran, ${writer.writes} append calls; log holds ${text.length} of ${sent.length} chars sent`);
    expect(proxy.dropped).toBeGreaterThanOrEqual(2);
    expect(text).toBe(sent);
  });
});

/**
 * A TCP proxy in front of Redis that, for every `every`-th script call, lets Redis run it and
 * then drops the client connection instead of passing the reply on: the client cannot know
 * whether its write landed, which is exactly what a retry must survive.
 */
async function replyDroppingProxy(redisUrl: string, every: number): Promise<{ url: string; dropped: number }> {
  const target = new URL(redisUrl);
  const state = { url: '', dropped: 0 };
  let scripts = 0;
  const server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    let dropReply = false;
    client.on('data', (chunk) => {
      // A transition is an FCALL (the library's load, FUNCTION LOAD, is let through).
      if (/\bFCALL\b/i.test(chunk.toString('latin1')) && ++scripts % every === 0) dropReply = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (dropReply) {
        state.dropped++;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
    const end = () => { client.destroy(); upstream.destroy(); };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  state.url = `redis://127.0.0.1:${(server.address() as AddressInfo).port}`;
  track(server, () => new Promise<void>((r) => server.close(() => r())));
  return state;
}
