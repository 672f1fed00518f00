import { createOpenAI } from '@ai-sdk/openai';
import { generateText } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import { createChatAgent } from '../src/lib/agents/chat.ts';
import { ConfigError, loadConfig } from '../src/lib/config/index.ts';
import { BatonError } from '../src/lib/errors.ts';
import { RATE_WINDOW_MS, RateLimiter } from '../src/lib/engine/flow/rate-limiter.ts';
import type { RateBucketCall, RateBucketReply } from '../src/lib/transitions/rate-bucket.ts';
import type { FlowGateway } from '../src/lib/transitions/flow-gateway.ts';
import { parseRateLimits, perSecond } from '../src/lib/config/rate-limits.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { durableModel } from '../src/lib/sdk/ai.ts';
import { PermanentError, TransientError } from '../src/lib/sdk/errors.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/**
 * Provider rate limits (RATE_LIMITS, src/lib/engine/flow/rate-limiter.ts, transitions/rate-bucket.lua): the
 * configuration, the bucket script's answers, its spread over the minute, its fair order
 * between scopes, the cap on a provider's pause, and the engine's use of it in ctx.infer,
 * createChatAgent and baton/ai, on real Redis with an in-process worker. The must-show with
 * three worker processes is test/rate-limits-processes.test.ts.
 *
 * The buckets that check the minute's window alone take `burst:60` (no spread), so that a
 * minute's grants can be asked for at once.
 */
const BUCKETS = [
  'rpm3=rpm:3,burst:60', 'tpm1000=tpm:1000,burst:60', 'pausing=rpm:100', 'operated=rpm:100', 'racing=rpm:20,burst:60', 'abort=rpm:100',
  'spread=rpm:600', 'spread-tokens=tpm:6000', 'whole-minute=rpm:600,burst:60', 'shared=rpm:600', 'weighted=rpm:600',
  'capped=rpm:100', 'runs-shared=rpm:600', 'openai:fake-day=rpm:100,tpm:100000',
  'memo=rpm:10,tpm:10000', 'held=rpm:1', 'unused=rpm:5', 'openai:fake-429=rpm:100,tpm:100000',
  'openai:fake-ai=rpm:100,tpm:100000', 'named:chat=rpm:100,tpm:100000', 'with/slash=rpm:5',
].join(';');

let h: Harness;
let fake: FakeOpenAI;
/** A provider that answers 429 with a day's Retry-After. */
let dayFake: FakeOpenAI;
let acme: ScopeClient;
let limiter: RateLimiter;
let metricsUrl: string;
let apiUrl: string;
/** Calls of each test agent's model function, by run. */
const calls = new Map<string, number>();
const called = (runId: string) => calls.set(runId, (calls.get(runId) ?? 0) + 1).get(runId)!;

const memoAgent = defineAgent({
  name: 'rl-memo',
  async run(ctx) {
    const text = await ctx.infer('model', (call) => {
      called(ctx.runId);
      call.recordUsage({ model: 'm', inputTokens: 30, outputTokens: 12 });
      return 'inferred';
    }, { rateLimit: { key: 'memo', tokens: 500 } });
    // The first attempt fails after its model call was stored: the second replays it from the memo.
    if (ctx.attempt === 1) throw new TransientError('after the model call', 'AFTER_CALL');
    return text;
  },
});

/** Takes `held`'s one grant a minute: the second run waits for it. */
const heldAgent = defineAgent({
  name: 'rl-held',
  async run(ctx) {
    return ctx.infer('model', () => {
      called(ctx.runId);
      return 'made';
    }, { rateLimit: { key: 'held' } });
  },
});

/** Model calls of the fair-share runs, in the order they were asked for and made: the scope and which. */
const fairCalls: { scope: string; kind: 'ask' | 'call' }[] = [];
/** FAIR_CALLS model calls one after another, each under `runs-shared` (rpm 600: 10 a second). */
const FAIR_CALLS = 12;
const fairAgent = defineAgent({
  name: 'rl-fair',
  async run(ctx) {
    for (let i = 0; i < FAIR_CALLS; i++) {
      fairCalls.push({ scope: ctx.scope, kind: 'ask' });
      await ctx.infer(`call-${i}`, () => {
        fairCalls.push({ scope: ctx.scope, kind: 'call' });
        return 'made';
      }, { rateLimit: { key: 'runs-shared' } });
    }
    return 'done';
  },
});

const unknownAgent = defineAgent({
  name: 'rl-unknown',
  async run(ctx) {
    return ctx.infer('model', () => 'never', { rateLimit: { key: 'no-such-bucket', tokens: 1 } });
  },
});

beforeAll(async () => {
  h = await useHarness({ RATE_LIMITS: BUCKETS });
  fake = await startFakeOpenAI();
  const api = await h.startApi();
  apiUrl = api.url;
  const openai = createOpenAI({ baseURL: fake.baseURL, apiKey: 'test-key' });
  const aiAgent = defineAgent({
    name: 'rl-ai',
    async run(ctx) {
      const { text } = await generateText({ model: durableModel(ctx, openai.chat('fake-ai')), prompt: ctx.input.content, maxOutputTokens: 50 });
      return text;
    },
  });
  const chat429 = createChatAgent({ name: 'rl-chat', model: 'fake-429', baseURL: fake.baseURL, apiKey: 'k', maxTokens: 64 });
  const chatNamed = createChatAgent({ name: 'rl-chat-named', model: 'fake-other', baseURL: fake.baseURL, apiKey: 'k', rateLimit: 'named:chat' });
  dayFake = await startFakeOpenAI();
  const chatDay = createChatAgent({ name: 'rl-chat-day', model: 'fake-day', baseURL: dayFake.baseURL, apiKey: 'k', maxTokens: 64 });
  const worker = await h.startWorker({ agents: [memoAgent, heldAgent, unknownAgent, fairAgent, aiAgent, chat429, chatNamed, chatDay] });
  metricsUrl = `${worker.opsUrl}/metrics`;
  acme = await h.client(api.url, 'acme', 'client');
  limiter = new RateLimiter(h.gateways().flow, h.config.RATE_LIMITS);
});

/** The bucket's grants, oldest first: [seq, tokens, r|s]. */
async function grants(bucket: string): Promise<[number, number, string][]> {
  const members = await h.redis.zrange(h.keys.rateGrants(bucket), 0, -1);
  return members.map((m) => {
    const [seq, tokens, state] = m.split(':');
    return [Number(seq), Number(tokens), state];
  });
}

const never = new AbortController().signal;

/** A limiter whose every step on a bucket is kept, with the script's reply: what a wait was told, in order. */
function recordingLimiter() {
  const t = h.gateways().flow;
  const looks: { op: RateBucketCall['op']; reply: RateBucketReply }[] = [];
  let looked = () => {};
  const recording: FlowGateway = Object.create(t);
  recording.rateBucket = async (bucket, windowMs, call) => {
    const reply = await t.rateBucket(bucket, windowMs, call);
    looks.push({ op: call.op, reply });
    looked();
    return reply;
  };
  const acquires = () => looks.filter((l) => l.op === 'acquire').map((l) => l.reply);
  /** Resolves once the next step has its reply. */
  const nextLook = () => new Promise<void>((resolve) => { looked = resolve; });
  return { limiter: new RateLimiter(recording, h.config.RATE_LIMITS), acquires, nextLook };
}

/** Whether `p` has settled after one turn of the event loop: no timer, no Redis reply in between. */
async function settledAtOnce(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  p.then(() => { settled = true; }, () => { settled = true; });
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

describe('RATE_LIMITS', () => {
  it('parses buckets of rpm and tpm, either or both, and a burst factor', () => {
    const limits = parseRateLimits(' openai:gpt-4o-mini=rpm:500,tpm:200000 ; anthropic:claude-3/haiku=rpm:50,burst:2;tokens.only=tpm:9;');
    expect([...limits]).toEqual([
      ['openai:gpt-4o-mini', { rpm: 500, tpm: 200000 }],
      ['anthropic:claude-3/haiku', { rpm: 50, burst: 2 }],
      ['tokens.only', { tpm: 9 }],
    ]);
    // A second's share of the minute, rounded up, times the burst; never more than the minute.
    expect(perSecond({ rpm: 600, tpm: 200000 }, 1)).toEqual({ requests: 10, tokens: 3334 });
    expect(perSecond({ rpm: 50 }, 2)).toEqual({ requests: 2, tokens: undefined });
    expect(perSecond({ rpm: 3 }, 60)).toEqual({ requests: 3, tokens: undefined });
    expect(loadConfig({}).RATE_LIMIT_BURST).toBe(1);
    expect(loadConfig({}).RATE_LIMIT_PAUSE_MAX_MS).toBe(300_000);
    expect(parseRateLimits('').size).toBe(0);
    expect(loadConfig({}).RATE_LIMITS.size).toBe(0);
  });

  it.each([
    ['a=rpm:0', /rpm must be from 1/],
    ['a=rpm:1.5', /not rpm:<n>, tpm:<n> or burst:<n>/],
    ['a=rps:3', /not rpm:<n>, tpm:<n> or burst:<n>/],
    ['a=rpm:3,rpm:4', /rpm is given twice/],
    ['a=', /not rpm:<n>, tpm:<n> or burst:<n>/],
    ['a=burst:2', /give rpm:<n>, tpm:<n> or both/],
    ['a=rpm:5,burst:0', /burst must be from 1 to 60/],
    ['a=rpm:5,burst:61', /burst must be from 1 to 60/],
    ['a', /expected <bucket>=rpm/],
    ['a=rpm:1;a=tpm:2', /defined twice/],
    ['{x}=rpm:1', /bucket name must match/],
    ['a b=rpm:1', /bucket name must match/],
    ['a=rpm:1;;b=rpm:2', /an empty entry/],
    ['a=rpm:10000000000', /rpm must be from 1 to 1000000000/],
  ])('refuses %j at start, saying why', (value, why) => {
    expect(() => parseRateLimits(value)).toThrow(why);
    let err: unknown;
    try {
      loadConfig({ RATE_LIMITS: value });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/RATE_LIMITS: /);
    expect((err as Error).message).toMatch(why);
  });
});

describe('the bucket script', () => {
  it('grants rpm requests in the window, then says when the oldest leaves it', async () => {
    for (let i = 0; i < 3; i++) await limiter.acquire('rpm3', 0, never);
    const reply = await h.gateways().flow.rateBucket('rpm3', RATE_WINDOW_MS, { op: 'acquire', rpm: 3, tokens: 0, pollMs: 250, pauseMs: 1000, askMs: 1000, graceMs: 500 });
    expect(reply).toMatchObject({ kind: 'wait', why: 'requests' });
    const waitMs = (reply as { waitMs: number }).waitMs;
    expect(waitMs).toBeGreaterThan(RATE_WINDOW_MS - 2_000);
    expect(waitMs).toBeLessThanOrEqual(RATE_WINDOW_MS + 1);
    expect(await limiter.state('rpm3')).toMatchObject({ bucket: 'rpm3', rpm: 3, tpm: null, requests: 3, paused: null });
    // The log and the sums expire with the window: nothing of a bucket outlives it.
    for (const key of [h.keys.rateBucket('rpm3'), h.keys.rateGrants('rpm3')]) {
      const ttl = await h.redis.pttl(key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(RATE_WINDOW_MS + 1000);
    }
  });

  it('counts reserved tokens until the settle, which gives back or takes the difference', async () => {
    const a = await limiter.acquire('tpm1000', 600, never);
    const call = () => h.gateways().flow.rateBucket('tpm1000', RATE_WINDOW_MS, { op: 'acquire', tpm: 1000, tokens: 600, pollMs: 250, pauseMs: 1000, askMs: 1000, graceMs: 500 });
    // 600 + 600 > 1000, but the first reservation may settle for less: look again soon.
    expect(await call()).toEqual({ kind: 'wait', why: 'tokens', waitMs: 250 });
    await limiter.settle(a, 100);
    const b = await limiter.acquire('tpm1000', 600, never);
    expect(await limiter.state('tpm1000')).toMatchObject({ tokens: 700, reservedTokens: 600 });
    // Settled for more than it reserved: the window holds what the provider reported.
    await limiter.settle(b, 800);
    expect(await limiter.state('tpm1000')).toMatchObject({ tokens: 900, reservedTokens: 0 });
    // Nothing in flight could free room: the wait is until the grants leave the window.
    const reply = await call();
    expect(reply).toMatchObject({ kind: 'wait', why: 'tokens' });
    expect((reply as { waitMs: number }).waitMs).toBeGreaterThan(RATE_WINDOW_MS - 2_000);
    expect((await grants('tpm1000')).map(([, t, s]) => [t, s])).toEqual([[100, 's'], [800, 's']]);
    // A settle of a grant the window no longer holds changes nothing.
    await limiter.settle({ ...a, member: '999:5:r' }, 3);
    expect(await limiter.state('tpm1000')).toMatchObject({ tokens: 900 });
  });

  it('refuses a reservation larger than tpm: it could never be granted', () => {
    expect(() => limiter.request({ key: 'tpm1000', tokens: 1001 }, 'infer:x:1')).toThrow(PermanentError);
    expect(() => limiter.request({ key: 'tpm1000', tokens: 1001 }, 'infer:x:1')).toThrow(/RATE|more than the bucket tpm1000 grants/);
    expect(() => limiter.request({ key: 'tpm1000' }, 'infer:x:1')).toThrow(/limits tokens per minute: give rateLimit.tokens/);
    expect(() => limiter.request({ key: 'nope', tokens: 1 }, 'infer:x:1')).toThrow(/no rate-limit bucket "nope"/);
    expect(limiter.request({ key: 'nope', tokens: 1, optional: true }, 'infer:x:1')).toBeUndefined();
    expect(() => limiter.request({ key: '{bad}' }, 'infer:x:1')).toThrow(TypeError);
    expect(limiter.request({ key: 'tpm1000', tokens: 99.2 }, 'infer:x:1')).toEqual({ bucket: 'tpm1000', tokens: 100 });
  });

  it("a provider's pause only moves later, holds every acquire, and ends by itself", async () => {
    const { limiter: recorded, acquires } = recordingLimiter();
    expect(await recorded.providerPause('pausing', 1_500)).toBe(true);
    expect(await recorded.providerPause('pausing', 300)).toBe(false);
    const state = await recorded.state('pausing');
    expect(state.paused).toMatchObject({ by: 'provider' });
    // 1.5 s from the pause's own time (Redis's); the shorter one moved nothing.
    const { untilMs, sinceMs } = state.paused!;
    expect(untilMs! - sinceMs!).toBe(1_500);
    await recorded.acquire('pausing', 0, never);
    // Held: each look before the grant was told to wait for the pause, at most a poll (1 s) at a
    // time and the last one only till its end; the grant came once it had passed (Redis's clock),
    // with nobody resuming it.
    const replies = acquires();
    const waits = replies.slice(0, -1);
    const granted = replies.at(-1)!;
    expect(waits.length).toBeGreaterThan(0);
    for (const w of waits) expect(w).toMatchObject({ kind: 'wait', why: 'paused' });
    for (const w of waits) expect((w as { waitMs: number }).waitMs).toBeLessThanOrEqual(1_000);
    expect((waits.at(-1) as { waitMs: number }).waitMs).toBeLessThan(1_000);
    expect(granted.kind).toBe('granted');
    expect((granted as { at: number }).at).toBeGreaterThanOrEqual(untilMs!);
    expect((await recorded.state('pausing')).paused).toBeNull();
  });

  it('an operator pauses until resumed, for a while or until a time; a resume lifts it at once', async () => {
    const { limiter: recorded, acquires } = recordingLimiter();
    expect((await limiter.pause('operated')).paused).toEqual({ by: 'operator', untilMs: null, sinceMs: expect.any(Number), askedMs: null, capped: false });
    // Paused until resumed: the bucket's hash is kept however long that is.
    expect(await h.redis.pttl(h.keys.rateBucket('operated'))).toBe(-1);
    const got = recorded.acquire('operated', 0, never);
    await sleep(1_300);
    expect(await settledAtOnce(got)).toBe(false);
    expect((await limiter.resume('operated')).paused).toBeNull();
    await got;
    // Within the pause's polling interval: while paused, each look was told to come back within
    // a second (no longer, however long the pause), and the look after the resume was the grant.
    const replies = acquires();
    expect(replies.length).toBeGreaterThan(1);
    expect(replies.slice(0, -1)).toEqual(replies.slice(0, -1).map(() => ({ kind: 'wait', why: 'paused', waitMs: 1_000 })));
    expect(replies.at(-1)!.kind).toBe('granted');

    const until = Date.now() + 60_000;
    expect((await limiter.pause('operated', { untilMs: until })).paused).toMatchObject({ by: 'operator', untilMs: until, askedMs: null, capped: false });
    // A provider's shorter pause does not shorten the operator's.
    expect(await limiter.providerPause('operated', 1_000)).toBe(false);
    const paused = (await limiter.pause('operated', { forMs: 5_000 })).paused!;
    expect(paused).toMatchObject({ by: 'operator', untilMs: paused.sinceMs! + 5_000 });
    await limiter.resume('operated');

    const soon = Date.now();
    const bads = [{ untilMs: soon - 1 }, { untilMs: soon + 100 }, { forMs: 999 }, { forMs: 1500.5 }, { untilMs: until, forMs: 5_000 }];
    for (const bad of bads) {
      await expect(limiter.pause('operated', bad)).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    }
    expect((await limiter.state('operated')).paused).toBeNull();
    await expect(limiter.pause('no-such')).rejects.toBeInstanceOf(BatonError);
    await expect(limiter.state('no-such')).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('an abort ends a wait at once', async () => {
    const { limiter: recorded, acquires, nextLook } = recordingLimiter();
    await limiter.pause('abort');
    const ac = new AbortController();
    const looked = nextLook();
    const waiting = recorded.acquire('abort', 0, ac.signal);
    // Its first look is told to wait (a second); a turn of the event loop later it sleeps.
    await looked;
    await new Promise((resolve) => setImmediate(resolve));
    ac.abort(new Error('cancelled'));
    // Rejected within the turn: not at its next look, nor after a call to Redis.
    expect(await settledAtOnce(waiting)).toBe(true);
    await expect(waiting).rejects.toThrow('cancelled');
    expect(acquires()).toEqual([{ kind: 'wait', why: 'paused', waitMs: 1_000 }]);
    await limiter.resume('abort');
  });

  it('grants exactly rpm to acquires racing from separate connections', async () => {
    const another = () => new RateLimiter(h.gateways().flow, h.config.RATE_LIMITS);
    const limiters = [limiter, another(), another()];
    const ac = new AbortController();
    const outcomes = Array.from({ length: 60 }, (_, i) => limiters[i % 3].acquire('racing', 0, ac.signal).then(() => 'granted', () => 'waiting'));
    await waitFor(async () => (await grants('racing')).length >= 20, 5_000, '20 grants');
    await sleep(500);
    ac.abort(new Error('done'));
    const settled = await Promise.all(outcomes);
    expect(settled.filter((o) => o === 'granted')).toHaveLength(20);
    expect(await grants('racing')).toHaveLength(20);
  });
});

/** A bucket's log as granted: each grant's time (Redis time), tokens and number, oldest first. */
async function grantLog(bucket: string): Promise<{ at: number; tokens: number; seq: number }[]> {
  const raw = await h.redis.zrange(h.keys.rateGrants(bucket), 0, -1, 'WITHSCORES');
  const log = [];
  for (let i = 0; i < raw.length; i += 2) {
    const [seq, tokens] = raw[i].split(':').map(Number);
    log.push({ at: Number(raw[i + 1]), tokens, seq });
  }
  return log.sort((a, b) => a.at - b.at || a.seq - b.seq);
}

/** The most grants, and tokens, that any one second (t - 1000, t] of a log holds. */
function busiestSecond(log: { at: number; tokens: number }[]): { requests: number; tokens: number } {
  let most = { requests: 0, tokens: 0 };
  for (const end of log) {
    const inIt = log.filter((g) => g.at > end.at - 1000 && g.at <= end.at);
    most = {
      requests: Math.max(most.requests, inIt.length),
      tokens: Math.max(most.tokens, inIt.reduce((n, g) => n + g.tokens, 0)),
    };
  }
  return most;
}

/** Function calls this Redis has served (INFO commandstats): every script call of the library is one. */
async function fcalls(): Promise<number> {
  const stats = await h.redis.info('commandstats');
  return Number(/cmdstat_fcall:calls=(\d+)/.exec(stats)?.[1] ?? 0);
}

/** A grant's number in its bucket (the order the script made them in). */
const seqOf = (g: { member: string }) => Number(g.member.split(':')[0]);

/**
 * `loops` callers of `scope` taking grants of `tokens` from `bucket` one after another until
 * `signal` aborts, as the model calls of a scope's runs do; each grant is pushed to `seen`.
 */
function flood(
  limiters: RateLimiter[], bucket: string, scope: string | undefined, loops: number, signal: AbortSignal,
  seen: { scope?: string; seq: number }[], tokens = 0,
): Promise<unknown> {
  return Promise.all(Array.from({ length: loops }, async (_, i) => {
    try {
      for (;;) seen.push({ scope, seq: seqOf(await limiters[i % limiters.length].acquire(bucket, tokens, signal, scope)) });
    } catch {
      // aborted: the flood is over
    }
  }));
}

describe('the spread over the minute', () => {
  it("a bucket of rpm 600 grants at most its second's share (10) in any second to callers racing on three limiters", async () => {
    const limiters = [limiter, ...[1, 2].map(() => new RateLimiter(h.gateways().flow, h.config.RATE_LIMITS))];
    const ac = new AbortController();
    const seen: { seq: number }[] = [];
    const flooding = flood(limiters, 'spread', undefined, 30, ac.signal, seen);
    await waitFor(() => seen.length >= 35, 20_000, '35 grants');
    ac.abort(new Error('done'));
    await flooding;
    const log = await grantLog('spread');
    const busiest = busiestSecond(log);
    console.log(`[rate-limits] spread rpm 600: ${log.length} grants, the busiest second held ${busiest.requests}`);
    expect(busiest.requests).toBeLessThanOrEqual(10);
    expect(log.length).toBeGreaterThanOrEqual(35);
    expect(log.length).toBe(seen.length);
    // The operator's view: the spread the bucket keeps.
    expect(await limiter.state('spread')).toMatchObject({ rpm: 600, burst: 1, perSecond: { requests: 10, tokens: null } });
  }, 30_000);

  it('the row: a bucket of burst 60 (no spread) lets a whole minute through in one second, as before', async () => {
    const ac = new AbortController();
    const seen: { seq: number }[] = [];
    const flooding = flood([limiter], 'whole-minute', undefined, 600, ac.signal, seen);
    await waitFor(() => seen.length >= 600, 20_000, '600 grants');
    ac.abort(new Error('done'));
    await flooding;
    const busiest = busiestSecond(await grantLog('whole-minute'));
    console.log(`[rate-limits] no spread, rpm 600: the busiest second held ${busiest.requests} grants`);
    expect(busiest.requests).toBeGreaterThan(10);
  }, 30_000);

  it('tokens spread the same way: at most ceil(tpm / 60) in any second, and a call larger than that only in a second that holds none', async () => {
    const ac = new AbortController();
    const seen: { seq: number }[] = [];
    // 30 tokens a call against 100 a second (tpm 6,000): three calls a second.
    const flooding = flood([limiter], 'spread-tokens', undefined, 10, ac.signal, seen, 30);
    await waitFor(() => seen.length >= 6, 20_000, '6 grants');
    // 250 tokens, more than a second's 100: the small calls hold off while it waits for an empty second.
    const asked = Number(await h.redis.hget(h.keys.rateBucket('spread-tokens'), 'seq'));
    const large = await limiter.acquire('spread-tokens', 250, never);
    const smallBefore = seen.filter((g) => g.seq > asked && g.seq < seqOf(large)).length;
    await waitFor(() => seen.length >= 12, 20_000, '12 grants');
    ac.abort(new Error('done'));
    await flooding;
    const log = await grantLog('spread-tokens');
    const big = log.find((g) => g.seq === seqOf(large))!;
    expect(big.tokens).toBe(250);
    // Alone in its second, before and after.
    expect(log.filter((g) => g !== big && Math.abs(g.at - big.at) < 1000)).toEqual([]);
    const busiest = busiestSecond(log.filter((g) => g !== big));
    console.log(`[rate-limits] spread tpm 6,000: ${log.length} grants, the busiest second held ${busiest.tokens} tokens of the small calls; ` +
      `${smallBefore} small calls granted between the large one's ask and its grant`);
    expect(busiest.tokens).toBeLessThanOrEqual(100);
    // At most the second going on when it asked (three calls of 30).
    expect(smallBefore).toBeLessThanOrEqual(3);
  }, 30_000);
});

describe('scopes share a bucket by weight', () => {
  /** Three limiters (as three workers), with the scopes' weights given. */
  const weighted = (weights: Record<string, number>) => [1, 2, 3].map(() => new RateLimiter(h.gateways().flow, h.config.RATE_LIMITS, {}, {
    burst: 1, pauseMaxMs: 300_000, weightOf: async (scope) => weights[scope] ?? 1,
  }));

  /**
   * The row: scope a floods the bucket (30 callers against 10 grants a second) and has it to
   * itself; then scope b asks with 3 callers. Returns how many of a's grants came between b's
   * first ask and b's first grant, and b's part of the next `count` grants.
   */
  async function contend(bucket: string, weights: Record<string, number>, count: number) {
    const limiters = weighted(weights);
    const ac = new AbortController();
    const acB = new AbortController();
    const seen: { scope?: string; seq: number }[] = [];
    const aFlood = flood(limiters, bucket, 'a', 30, ac.signal, seen);
    // a alone takes the whole bucket: a second's share every second.
    await waitFor(() => seen.length >= 20, 20_000, "20 of a's grants");
    const aloneBusiest = busiestSecond(await grantLog(bucket)).requests;
    const before = Number(await h.redis.hget(h.keys.rateBucket(bucket), 'seq'));
    const [callsBefore, grantsBefore] = [await fcalls(), seen.length];
    const bFlood = flood(limiters, bucket, 'b', 3, AbortSignal.any([ac.signal, acB.signal]), seen);
    await waitFor(() => seen.filter((g) => g.scope === 'b').length >= 1, 20_000, "b's first grant");
    // Both wait for the bucket now, and operators see it.
    const waiting = await waitFor(async () => {
      const w = (await limiter.state(bucket)).waiting;
      return w.count === 2 ? w : undefined;
    }, 10_000, 'both scopes waiting');
    const bFirst = Math.min(...seen.filter((g) => g.scope === 'b').map((g) => g.seq));
    await waitFor(() => seen.filter((g) => g.seq > bFirst).length >= count, 30_000, `${count} grants after b's first`);
    const next = seen.filter((g) => g.seq > bFirst).sort((x, y) => x.seq - y.seq).slice(0, count);
    // What the waiting costs Redis: script calls per grant while 33 callers contend for 10 grants a second.
    const callsPerGrant = (await fcalls() - callsBefore) / (seen.length - grantsBefore);
    // b goes away: its place lapses, and a has the bucket again.
    acB.abort(new Error('b is done'));
    await bFlood;
    const afterB = seen.length;
    await waitFor(() => seen.length >= afterB + 10, 20_000, '10 more grants of a alone');
    ac.abort(new Error('done'));
    await aFlood;
    const aAhead = seen.filter((g) => g.scope === 'a' && g.seq > before && g.seq < bFirst).length;
    const bPart = next.filter((g) => g.scope === 'b').length / count;
    return { aloneBusiest, aAhead, bPart, waiting, callsPerGrant };
  }

  it("equal weights: b's calls are granted within the second going on, then every other grant is b's", async () => {
    const r = await contend('shared', { a: 1, b: 1 }, 40);
    console.log(`[rate-limits] fair share 1:1 — a alone: ${r.aloneBusiest} grants in its busiest second; ` +
      `a's grants between b's first ask and its first grant: ${r.aAhead}; b's part of the next 40: ${r.bPart}; ` +
      `${r.callsPerGrant.toFixed(1)} script calls per grant (33 callers, other files' calls included when files run together)`);
    expect(r.aloneBusiest).toBe(10);
    expect(r.aAhead).toBeLessThanOrEqual(10);
    expect(r.bPart).toBeGreaterThanOrEqual(0.4);
    expect(r.bPart).toBeLessThanOrEqual(0.6);
    // Operators see who waits.
    expect(r.waiting.count).toBe(2);
    expect([...r.waiting.scopes].sort()).toEqual(['a', 'b']);
  }, 60_000);

  it("weights 1:3: b's part is three grants of every four", async () => {
    const r = await contend('weighted', { a: 1, b: 3 }, 40);
    console.log(`[rate-limits] fair share 1:3 — a's grants between b's first ask and its first grant: ${r.aAhead}; b's part of the next 40: ${r.bPart}`);
    expect(r.aAhead).toBeLessThanOrEqual(10);
    expect(r.bPart).toBeGreaterThanOrEqual(0.65);
    expect(r.bPart).toBeLessThanOrEqual(0.85);
  }, 60_000);
});

describe("a provider's pause", () => {
  it('a Retry-After of a day pauses the bucket for RATE_LIMIT_PAUSE_MAX_MS; operators see what it asked for', async () => {
    expect(await limiter.providerPause('capped', 86_400_000)).toBe(true);
    const [until, since, asked] = (await h.redis.hmget(h.keys.rateBucket('capped'), 'pausedUntil', 'pausedAt', 'pauseAsked')).map(Number);
    expect(until - since).toBe(300_000);
    expect(asked).toBe(86_400_000);
    expect((await limiter.state('capped')).paused).toEqual({ by: 'provider', untilMs: until, sinceMs: since, askedMs: 86_400_000, capped: true });
    // The bucket's hash is kept as long as the pause, no longer.
    expect(await h.redis.pttl(h.keys.rateBucket('capped'))).toBeLessThanOrEqual(300_000 + 1_000);
    await limiter.resume('capped');
    // One within the cap is what the provider asked.
    expect(await limiter.providerPause('capped', 2_000)).toBe(true);
    expect((await limiter.state('capped')).paused).toMatchObject({ by: 'provider', askedMs: 2_000, capped: false });
    await limiter.resume('capped');
    expect(await h.redis.hmget(h.keys.rateBucket('capped'), 'pausedUntil', 'pausedAt', 'pauseAsked')).toEqual([null, null, null]);
  });

  it("the row: a chat run's 429 with Retry-After: 86400 pauses the shared bucket for the cap, not a day", async () => {
    dayFake.overload(86_400);
    const sub = await acme.submit('day', 'hello #day', { agent: 'rl-chat-day' });
    const bucket = h.keys.rateBucket('openai:fake-day');
    await waitFor(() => h.redis.hget(bucket, 'pausedUntil'), 20_000, 'the pause');
    const [until, since, asked] = (await h.redis.hmget(bucket, 'pausedUntil', 'pausedAt', 'pauseAsked')).map(Number);
    console.log(`[rate-limits] Retry-After 86400: the bucket is paused for ${until - since} ms (asked ${asked} ms)`);
    expect(until - since).toBe(h.config.RATE_LIMIT_PAUSE_MAX_MS);
    expect(asked).toBe(86_400_000);
    const operator = { authorization: `Bearer ${await h.operatorKey()}` };
    const list = await call(apiUrl, 'GET', '/v1/rate-limits', undefined, operator);
    expect(list.body.buckets.find((b: { bucket: string }) => b.bucket === 'openai:fake-day').paused).toEqual({
      by: 'provider', untilMs: until, sinceMs: since, askedMs: 86_400_000, capped: true,
    });
    // The call that got it goes to the retry policy (a pause over a minute is not waited out in the step).
    await acme.waitStatus(sub.body.id, ['retrying'], 20_000);
    expect((await acme.post(`/runs/${sub.body.id}/cancel`)).status).toBe(200);
    await limiter.resume('openai:fake-day');
  });
});

describe('ctx.infer under a bucket', () => {
  it('a memoized model call that replays takes no grant, and its grant is settled with its usage', async () => {
    const sub = await acme.submit('memo', 'x', { agent: 'rl-memo' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 20_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 2, result: { answer: 'inferred' } });
    expect(calls.get(run.id)).toBe(1);
    // One grant, settled with the 42 tokens the call recorded (it reserved 500).
    expect(await grants('memo')).toEqual([[1, 42, 's']]);
  });

  it('a run waiting for its bucket keeps its lease, and a cancel ends the wait at once', async () => {
    const first = await acme.submit('held-1', 'x', { agent: 'rl-held' });
    await acme.waitStatus(first.body.id, ['succeeded'], 20_000);
    const second = (await acme.submit('held-2', 'x', { agent: 'rl-held' })).body.id;
    const running = await acme.waitStatus(second, ['running'], 20_000);
    // Two leases and more (LEASE_MS 2000): still the first claim, never taken over.
    await sleep(4_500);
    const still = (await acme.get(`/runs/${second}`)).body;
    expect(still.status).toBe('running');
    expect(still.attempt).toBe(running.attempt);
    expect(await h.redis.hget(h.keys.scope('acme').run(second), 'fence')).toBe('1');
    expect(calls.get(second)).toBeUndefined();
    // The cancel ends the wait, not the window freeing (a minute after the first run's grant):
    // the run is cancelled with the bucket's one grant still the first run's, its call never made.
    const cancelledAt = Date.now();
    expect((await acme.post(`/runs/${second}/cancel`)).status).toBe(200);
    await acme.waitStatus(second, ['cancelled'], 20_000);
    console.log(`[rate-limits] a run waiting for its bucket cancelled in ${Date.now() - cancelledAt} ms`);
    expect(await grants('held')).toHaveLength(1);
    expect(calls.get(second)).toBeUndefined();
  }, 30_000);

  it("the row: scope acme's runs flood a bucket, and beta's runs (weight 3) get three of every four calls from their first", async () => {
    const operator = { authorization: `Bearer ${await h.operatorKey()}` };
    expect((await call(apiUrl, 'PUT', '/v1/scopes/beta/limits', { weight: 3 }, operator)).status).toBe(200);
    const beta = await h.client(apiUrl, 'beta', 'client');
    // acme: eight runs (its maxActive) of 12 calls each, against 10 grants a second; alone first.
    const acmeRuns = await Promise.all(Array.from({ length: 8 }, (_, i) => acme.submit(`fair-a${i}`, 'x', { agent: 'rl-fair' })));
    await waitFor(() => fairCalls.filter((c) => c.kind === 'call').length >= 20, 20_000, "acme's first 20 calls");
    const betaRuns = await Promise.all([1, 2].map((i) => beta.submit(`fair-b${i}`, 'x', { agent: 'rl-fair' })));
    for (const r of [...betaRuns, ...acmeRuns]) {
      const client = betaRuns.includes(r) ? beta : acme;
      expect(await client.waitStatus(r.body.id, ['succeeded', 'failed'], 30_000)).toMatchObject({ status: 'succeeded' });
    }
    const firstAsk = fairCalls.findIndex((c) => c.scope === 'beta');
    const firstCall = fairCalls.findIndex((c) => c.scope === 'beta' && c.kind === 'call');
    const acmeAhead = fairCalls.slice(firstAsk, firstCall).filter((c) => c.scope === 'acme' && c.kind === 'call').length;
    // The calls made from beta's first to its last: acme's runs asked all along (they made calls after).
    const made = fairCalls.slice(firstCall).filter((c) => c.kind === 'call');
    const lastBeta = made.map((c) => c.scope).lastIndexOf('beta');
    const contended = made.slice(0, lastBeta + 1);
    const betaPart = contended.filter((c) => c.scope === 'beta').length / contended.length;
    const betaCalls = contended.filter((c) => c.scope === 'beta').length;
    console.log(`[rate-limits] runs: acme's calls between beta's first ask and its first call: ${acmeAhead}; ` +
      `beta's part of the ${contended.length} calls made while both asked: ${betaPart.toFixed(2)} (weight 3 of 4)`);
    expect(acmeAhead).toBeLessThanOrEqual(10);
    expect(betaCalls).toBe(2 * FAIR_CALLS);
    // beta's calls came while acme's runs were still asking: its share, not leftovers.
    expect(made.slice(lastBeta + 1).some((c) => c.scope === 'acme')).toBe(true);
    expect(betaPart).toBeGreaterThanOrEqual(0.6);
    expect(betaPart).toBeLessThanOrEqual(0.9);
  }, 60_000);

  it('a bucket RATE_LIMITS does not define fails the run, naming it', async () => {
    const sub = await acme.submit('unknown', 'x', { agent: 'rl-unknown' });
    const run = await acme.waitStatus(sub.body.id, ['failed'], 20_000);
    expect(run.lastError.message).toMatch(/no rate-limit bucket "no-such-bucket"/);
  });
});

describe('createChatAgent and baton/ai', () => {
  it("a provider's 429 pauses the bucket, and the call that got it is made again after the pause, in the same attempt", async () => {
    fake.script('#429', [answer('after the pause', { usage: { prompt_tokens: 20, completion_tokens: 3 } })]);
    fake.overload(1);
    const sub = await acme.submit('429', 'hello #429', { agent: 'rl-chat' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 20_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'after the pause' } });
    const sent = fake.requestsFor('#429');
    expect(sent.map((r) => r.reply.kind)).toEqual(['status', 'stream']);
    expect(sent[1].at - sent[0].at).toBeGreaterThanOrEqual(950);
    // The answer's cap went to the provider, and was part of the reservation.
    expect(sent[0].body.max_completion_tokens).toBe(64);
    // Two grants: the refused call's settled at 0, the answered one's at the usage reported.
    expect((await grants('openai:fake-429')).map(([, t, s]) => [t, s])).toEqual([[0, 's'], [23, 's']]);
  });

  it('createChatAgent takes the bucket it names; baton/ai its default <provider>:<model>', async () => {
    fake.script('#named', [answer('named', { usage: { prompt_tokens: 7, completion_tokens: 1 } })]);
    const named = await acme.submit('named', 'hi #named', { agent: 'rl-chat-named' });
    expect(await acme.waitStatus(named.body.id, ['succeeded', 'failed'], 20_000)).toMatchObject({ status: 'succeeded' });
    expect((await grants('named:chat')).map(([, t, s]) => [t, s])).toEqual([[8, 's']]);

    fake.script('#ai', [answer('from the sdk', { usage: { prompt_tokens: 11, completion_tokens: 4 } })]);
    const ai = await acme.submit('ai', 'hi #ai', { agent: 'rl-ai' });
    expect(await acme.waitStatus(ai.body.id, ['succeeded', 'failed'], 20_000)).toMatchObject({ status: 'succeeded', result: { answer: 'from the sdk' } });
    expect((await grants('openai:fake-ai')).map(([, t, s]) => [t, s])).toEqual([[15, 's']]);
  });
});

describe('metrics', () => {
  it('exports each bucket: its limits, its window, the waits and the pauses', async () => {
    const body = await (await fetch(metricsUrl)).text();
    expect(body).toContain('baton_rate_limit_limit{bucket="tpm1000",unit="tokens"} 1000');
    expect(body).toContain('baton_rate_limit_used{bucket="rpm3",unit="requests"} 3');
    expect(body).toContain('baton_rate_limit_waiting_scopes{bucket="rpm3"} 0');
    expect(body).toContain('baton_rate_limit_wait_seconds_count{bucket="unused"} 0');
    expect(body).toContain('baton_rate_limit_pauses_total{bucket="unused",by="provider"} 0');
    // This worker's one 429 pause, and the waits of its model calls (the 429's second call waited the pause out).
    expect(body).toContain('baton_rate_limit_pauses_total{bucket="openai:fake-429",by="provider"} 1');
    const waited = Number(/baton_rate_limit_wait_seconds_sum\{bucket="openai:fake-429"\} (\S+)/.exec(body)?.[1]);
    expect(waited).toBeGreaterThan(0.9);
    expect(body).not.toContain('bucket="no-such-bucket"');
  });
});

describe('the operator routes', () => {
  it('list the buckets, pause one for every worker and resume it; a scope key is 403, an unknown bucket 404', async () => {
    const operator = { authorization: `Bearer ${await h.operatorKey()}` };
    const list = await call(apiUrl, 'GET', '/v1/rate-limits', undefined, operator);
    expect(list.status).toBe(200);
    expect(list.body.windowMs).toBe(RATE_WINDOW_MS);
    expect(list.body.providerPauseMaxMs).toBe(300_000);
    expect(list.body.buckets.map((b: { bucket: string }) => b.bucket)).toEqual([...h.config.RATE_LIMITS.keys()]);
    expect(list.body.buckets.find((b: { bucket: string }) => b.bucket === 'rpm3')).toEqual({
      bucket: 'rpm3', rpm: 3, tpm: null, burst: 60, perSecond: { requests: 3, tokens: null },
      requests: 3, tokens: 0, reservedTokens: 0, lastSecond: { requests: 0, tokens: 0 },
      waiting: { count: 0, scopes: [] }, paused: null,
    });
    expect(list.body.buckets.find((b: { bucket: string }) => b.bucket === 'spread-tokens')).toMatchObject({
      burst: 1, perSecond: { requests: null, tokens: 100 },
    });

    const path = `/v1/rate-limits/${encodeURIComponent('named:chat')}/pause`;
    const paused = await call(apiUrl, 'POST', path, { forMs: 60_000 }, operator);
    expect(paused).toMatchObject({ status: 200, body: { bucket: 'named:chat', paused: { by: 'operator' } } });
    // Every worker's next call of that bucket waits: this run does not reach the provider while it lasts.
    fake.script('#held-by-operator', [answer('after the resume')]);
    const run = (await acme.submit('op-pause', 'hi #held-by-operator', { agent: 'rl-chat-named' })).body.id;
    await acme.waitStatus(run, ['running'], 20_000);
    await sleep(1_500);
    expect(fake.requestsFor('#held-by-operator')).toHaveLength(0);
    const resumed = await call(apiUrl, 'DELETE', path, undefined, operator);
    expect(resumed).toMatchObject({ status: 200, body: { bucket: 'named:chat', paused: null } });
    expect(await acme.waitStatus(run, ['succeeded', 'failed'], 20_000)).toMatchObject({ status: 'succeeded', result: { answer: 'after the resume' } });

    // A `/` in a name travels percent-encoded.
    expect((await call(apiUrl, 'POST', '/v1/rate-limits/with%2Fslash/pause', { forMs: 5_000 }, operator)).body)
      .toMatchObject({ bucket: 'with/slash', paused: { by: 'operator' } });
    const unpaused = await call(apiUrl, 'POST', '/v1/rate-limits/unused/pause', {}, operator);
    expect(unpaused.body.paused).toMatchObject({ by: 'operator', untilMs: null, askedMs: null, capped: false });
    expect((await call(apiUrl, 'DELETE', '/v1/rate-limits/unused/pause', undefined, operator)).body.paused).toBeNull();

    expect(await call(apiUrl, 'POST', '/v1/rate-limits/unused/pause', { untilMs: Date.now() + 10_000, forMs: 5_000 }, operator))
      .toMatchObject({ status: 400, body: { error: { code: 'VALIDATION_FAILED', details: [{ path: 'body.forMs' }] } } });
    expect(await call(apiUrl, 'POST', '/v1/rate-limits/no-such/pause', {}, operator))
      .toMatchObject({ status: 404, body: { error: { code: 'NOT_FOUND' } } });
    const admin = { authorization: `Bearer ${await h.key('acme', 'admin')}` };
    expect((await call(apiUrl, 'GET', '/v1/rate-limits', undefined, admin)).status).toBe(403);
    expect((await call(apiUrl, 'POST', '/v1/rate-limits/unused/pause', {}, admin)).status).toBe(403);
    expect((await limiter.state('unused')).paused).toBeNull();
  }, 30_000);
});
