import fc from 'fast-check';
import { APIConnectionError, APIError } from 'openai';
import { describe, expect, it } from 'vitest';
import { OutputInvalidError, PermanentError, RetryAfterError, TransientError } from '../src/lib/sdk/errors.ts';
import { backoffMs, classify, isTransientStatus, parseRetryAfter } from '../src/lib/sdk/retry-policy.ts';

/** Invariant 6's rules, without Redis: what retries, what fails at once, how long to wait. */
const httpError = (status: number, headers: Record<string, string> = {}) =>
  Object.assign(new Error(`provider answered ${status}`), { status, headers });

describe('classify', () => {
  it("honours Baton's error types", () => {
    expect(classify(new TransientError('blip'))).toEqual({ kind: 'transient', code: 'TRANSIENT', message: 'blip' });
    expect(classify(new TransientError('blip', 'UPSTREAM'))).toMatchObject({ kind: 'transient', code: 'UPSTREAM' });
    expect(classify(new RetryAfterError('later', 1500))).toEqual({ kind: 'transient', code: 'RETRY_AFTER', message: 'later', retryAfterMs: 1500 });
    const at = new Date(Date.now() + 60_000);
    const byDate = classify(new RetryAfterError('later', at));
    expect(byDate.kind === 'transient' && byDate.retryAfterMs).toBeGreaterThan(55_000);
    expect(classify(new RetryAfterError('past', new Date(Date.now() - 5000)))).toMatchObject({ retryAfterMs: 0 });
    expect(classify(new PermanentError('no', 'BAD_INPUT'))).toEqual({ kind: 'permanent', code: 'BAD_INPUT', message: 'no', details: undefined });
    expect(classify(new OutputInvalidError([{ path: '/a' }]))).toMatchObject({ kind: 'permanent', code: 'OUTPUT_INVALID', details: [{ path: '/a' }] });
  });

  it('retries provider 408/425/429/5xx and fails every other status at once', () => {
    for (const s of [408, 425, 429, 500, 502, 503, 504, 529]) {
      expect(classify(httpError(s))).toMatchObject({ kind: 'transient', code: `HTTP_${s}` });
      expect(isTransientStatus(s)).toBe(true);
    }
    for (const s of [400, 401, 403, 404, 409, 413, 422]) {
      expect(classify(httpError(s))).toMatchObject({ kind: 'permanent', code: `HTTP_${s}` });
      expect(isTransientStatus(s)).toBe(false);
    }
  });

  it('reads Retry-After from plain and Headers objects, seconds, dates and retry-after-ms', () => {
    expect(classify(httpError(429, { 'retry-after': '3' }))).toMatchObject({ retryAfterMs: 3000 });
    expect(classify(httpError(503, { 'retry-after-ms': '250', 'retry-after': '9' }))).toMatchObject({ retryAfterMs: 250 });
    const date = new Date(Date.now() + 30_000).toUTCString();
    const fromDate = classify(httpError(503, { 'retry-after': date }));
    expect(fromDate.kind === 'transient' && fromDate.retryAfterMs).toBeGreaterThan(25_000);
    expect(classify(httpError(429, { 'retry-after': 'soon' }))).toMatchObject({ kind: 'transient', retryAfterMs: undefined });
    // The OpenAI SDK's own error, with a fetch Headers object.
    const sdk = APIError.generate(429, { message: 'rate limited' }, undefined, new Headers({ 'retry-after': '2' }));
    expect(classify(sdk)).toMatchObject({ kind: 'transient', code: 'HTTP_429', retryAfterMs: 2000 });
    const bad = APIError.generate(400, { message: 'bad request' }, undefined, new Headers());
    expect(classify(bad)).toMatchObject({ kind: 'permanent', code: 'HTTP_400' });
  });

  it('retries network errors and timeouts, also when wrapped', () => {
    const reset = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    expect(classify(reset)).toMatchObject({ kind: 'transient', code: 'ECONNRESET' });
    // fetch: TypeError('fetch failed') whose cause carries the socket error.
    const fetchFailed = new TypeError('fetch failed', { cause: Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }) });
    expect(classify(fetchFailed)).toMatchObject({ kind: 'transient', code: 'ECONNREFUSED' });
    // An SDK wrapping fetch's error once more.
    const sdk = new APIConnectionError({ message: 'Connection error.', cause: fetchFailed });
    expect(classify(sdk)).toMatchObject({ kind: 'transient', code: 'ECONNREFUSED' });
    expect(classify(new DOMException('The operation timed out.', 'TimeoutError'))).toMatchObject({ kind: 'transient', code: 'TIMEOUT' });
    expect(classify(Object.assign(new Error('undici'), { code: 'UND_ERR_HEADERS_TIMEOUT' }))).toMatchObject({ kind: 'transient' });
  });

  it('fails everything else at once, naming what it was', () => {
    expect(classify(new TypeError('x is undefined'))).toEqual({ kind: 'permanent', code: 'TypeError', message: 'x is undefined' });
    expect(classify(new Error('boom'))).toEqual({ kind: 'permanent', code: 'AGENT_ERROR', message: 'boom' });
    expect(classify('a string')).toEqual({ kind: 'permanent', code: 'AGENT_ERROR', message: 'a string' });
    expect(classify(Object.assign(new Error('no such file'), { code: 'ENOENT' }))).toMatchObject({ kind: 'permanent' });
    expect(classify(undefined)).toMatchObject({ kind: 'permanent', code: 'AGENT_ERROR' });
  });
});

describe('parseRetryAfter', () => {
  it('takes seconds or an HTTP date, and nothing else', () => {
    expect(parseRetryAfter('0')).toBe(0);
    expect(parseRetryAfter('120')).toBe(120_000);
    expect(parseRetryAfter(undefined)).toBeUndefined();
    expect(parseRetryAfter('')).toBeUndefined();
    expect(parseRetryAfter('not a date')).toBeUndefined();
    expect(parseRetryAfter(new Date(Date.now() - 1000).toUTCString())).toBe(0);
  });
});

describe('backoffMs', () => {
  it('stays within [0, min(max, base * 2^(attempt-1))) for any attempt and random draw', () => {
    fc.assert(fc.property(
      fc.integer({ min: 1, max: 60 }), fc.integer({ min: 1, max: 10_000 }), fc.integer({ min: 1, max: 600_000 }),
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      (attempt, base, max, r) => {
        const d = backoffMs(attempt, base, max, undefined, () => r);
        const ceiling = Math.min(max, base * 2 ** (attempt - 1));
        return Number.isInteger(d) && d >= 0 && d < ceiling;
      },
    ));
  });

  it('grows exponentially until the cap, with full jitter', () => {
    const top = (attempt: number) => backoffMs(attempt, 1000, 60_000, undefined, () => 0.999999);
    expect([1, 2, 3, 4, 5, 6, 7, 8].map(top)).toEqual([999, 1999, 3999, 7999, 15999, 31999, 59999, 59999]);
    expect(backoffMs(3, 1000, 60_000, undefined, () => 0)).toBe(0);
    expect(backoffMs(3, 1000, 60_000, undefined, () => 0.5)).toBe(2000);
  });

  it("takes the provider's Retry-After instead, bounded to an hour", () => {
    expect(backoffMs(1, 1000, 60_000, 5000)).toBe(5000);
    expect(backoffMs(9, 1000, 60_000, 0)).toBe(0);
    expect(backoffMs(1, 1000, 60_000, 90_000)).toBe(90_000);
    expect(backoffMs(1, 1000, 60_000, 10 * 3600_000)).toBe(3600_000);
  });

  it('ignores a Retry-After that is not a number (RetryAfterError given no time), backing off as usual', () => {
    const hint = new RetryAfterError('slow down', undefined as unknown as number).retryAfterMs;
    expect(Number.isNaN(hint)).toBe(true);
    expect(backoffMs(2, 1000, 60_000, hint, () => 0.5)).toBe(1000);
  });
});
