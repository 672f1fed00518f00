import { UNDECODED, type ScriptCaller } from './caller.ts';
import { decodeAnswer, flag, num, strings, text, type Replies } from './reply.ts';

/** One step on a provider's rate-limit bucket (rate-bucket.lua), as RateLimiter (rate-limiter.ts) asks it. */
export type RateBucketCall =
  | {
    op: 'acquire'; rpm?: number; tpm?: number; tokens: number; pollMs: number; pauseMs: number;
    /** The spread: grants and tokens in any one second (absent: not spread). */
    second?: { requests?: number; tokens?: number };
    /**
     * A refused caller asks again within askMs; its place (in the fair order, or a large call's
     * hold on the second) lasts till then and graceMs more.
     */
    askMs: number; graceMs: number;
    /** The scope asking and its weight (absent: no place in the fair order). */
    scope?: string; weight?: number;
  }
  | { op: 'settle'; member: string; actual: number }
  /** `askedMs`: what a provider's Retry-After asked for, before the cap. */
  | { op: 'pause'; untilMs?: number; forMs?: number; by: 'provider' | 'operator'; askedMs?: number }
  | { op: 'resume' }
  | { op: 'read' };

export type RateBucketReply =
  /** Granted at `at` (Redis time); `member` names the grant for its settle. */
  | { kind: 'granted'; member: string; at: number; requests: number; tokens: number }
  | { kind: 'wait'; waitMs: number; why: RateWaitReason }
  | { kind: 'too-large'; tpm: number }
  | { kind: 'settled' }
  /** `moved`: this call set the pause or moved its end (a provider's pause only ever moves it later). */
  | { kind: 'paused'; pausedUntil: number; moved: boolean }
  | { kind: 'resumed'; lifted: boolean }
  /**
   * The window as of `now` (Redis time); pausedUntil 0: not paused, -1: until resumed; pausedAt
   * when it was set and pauseAsked a provider's Retry-After before the cap (0: not known, none);
   * the last second's grants; the scopes waiting (the first 20, next served first) and their count.
   */
  | {
    kind: 'state'; requests: number; tokens: number; reserved: number; pausedUntil: number; pausedBy: string; now: number;
    pausedAt: number; pauseAsked: number; secondRequests: number; secondTokens: number; waiting: string[]; waitingCount: number;
  };

/** Why an acquire must wait: a pause, the minute's requests or tokens, the second's spread, or a scope ahead in the fair order. */
export type RateWaitReason = 'paused' | 'requests' | 'tokens' | 'second' | 'share';

/** By op: acquire answers Granted, Waiting or TooLarge; settle, pause, resume and read their own. */
export const REPLY = {
  Granted: { member: text, at: num, requests: num, tokens: num },
  Waiting: { waitMs: num, why: text },
  TooLarge: { tpm: num },
  Settled: {},
  Paused: { pausedUntil: num, moved: flag },
  Resumed: { lifted: flag },
  Read: {
    requests: num, tokens: num, reserved: num, pausedUntil: num, pausedBy: text, now: num,
    pausedAt: num, pauseAsked: num, secondRequests: num, secondTokens: num, waiting: strings, waitingCount: num,
  },
} satisfies Replies;

/** One atomic step on the rate-limit bucket `bucket` (RATE_LIMITS), over a window of `windowMs` (rate-bucket.lua). */
export async function rateBucket(c: ScriptCaller, bucket: string, windowMs: number, call: RateBucketCall): Promise<RateBucketReply> {
  const k = c.keys;
  const keys = {
    bucket: k.rateBucket(bucket), grants: k.rateGrants(bucket), tags: k.rateTags(bucket),
    waiting: k.rateWaiting(bucket), lapses: k.rateLapses(bucket),
  };
  const raw = await c.call('rate-bucket', UNDECODED, null, keys, { windowMs, ...call });
  switch (call.op) {
    case 'acquire': {
      const r = decodeAnswer('rate-bucket', REPLY, raw, ['Granted', 'Waiting', 'TooLarge']);
      switch (r.outcome) {
        case 'Granted': return { kind: 'granted', member: r.member, at: r.at, requests: r.requests, tokens: r.tokens };
        case 'Waiting': return { kind: 'wait', waitMs: r.waitMs, why: r.why as RateWaitReason };
        default: return { kind: 'too-large', tpm: r.tpm };
      }
    }
    case 'settle': return { kind: 'settled' };
    case 'pause': {
      const r = decodeAnswer('rate-bucket', REPLY, raw, ['Paused']);
      return { kind: 'paused', pausedUntil: r.pausedUntil, moved: r.moved };
    }
    case 'resume': return { kind: 'resumed', lifted: decodeAnswer('rate-bucket', REPLY, raw, ['Resumed']).lifted };
    case 'read': {
      const r = decodeAnswer('rate-bucket', REPLY, raw, ['Read']);
      return {
        kind: 'state', requests: r.requests, tokens: r.tokens, reserved: r.reserved, pausedUntil: r.pausedUntil,
        pausedBy: r.pausedBy, now: r.now, pausedAt: r.pausedAt, pauseAsked: r.pauseAsked,
        secondRequests: r.secondRequests, secondTokens: r.secondTokens, waiting: r.waiting, waitingCount: r.waitingCount,
      };
    }
  }
}
