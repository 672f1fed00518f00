import { RATE_WINDOW_MS } from '../lib/engine/flow/rate-limiter.ts';
import * as res from './response-schemas.ts';
import { route, type RouteSpec } from './route.ts';
import { bucketParams, ratePauseBody } from './schemas.ts';

/**
 * Model providers' rate-limit buckets (RATE_LIMITS; src/lib/engine/flow/rate-limiter.ts): shared by
 * every scope, so only an operator key reads, pauses and resumes them; a key of any scope gets
 * 403. A bucket RATE_LIMITS does not define is 404.
 */
export const rateLimitRoutes: RouteSpec[] = [
  route({
    method: 'get', path: '/v1/rate-limits',
    summary: 'Every provider rate-limit bucket: its limits and spread, what its window and last second hold, the scopes waiting, and its pause (an operator key only).',
    access: 'operator',
    ok: { 200: { description: 'the buckets', schema: res.rateLimitsResponse } },
    async handler(_input, d) {
      const body = { windowMs: RATE_WINDOW_MS, providerPauseMaxMs: d.rateLimits.settings.pauseMaxMs, buckets: await d.rateLimits.list() };
      return { headers: { 'cache-control': 'no-store' }, body };
    },
  }),
  route({
    method: 'post', path: '/v1/rate-limits/:bucket/pause',
    summary: 'Pause a bucket for every worker: until untilMs, for forMs, or (neither) until resumed. Calls waiting for it go on waiting.',
    access: 'operator', params: bucketParams, body: ratePauseBody,
    ok: { 200: { description: 'the bucket, paused', schema: res.rateLimitBucketResponse } },
    errors: ['NOT_FOUND'],
    async handler({ params: { bucket }, body }, d) {
      return { headers: { 'cache-control': 'no-store' }, body: await d.rateLimits.pause(bucket, body) };
    },
  }),
  route({
    method: 'delete', path: '/v1/rate-limits/:bucket/pause',
    summary: "Lift a bucket's pause, an operator's or a provider's: waiting calls go on within a second.",
    access: 'operator', params: bucketParams,
    ok: { 200: { description: 'the bucket, not paused', schema: res.rateLimitBucketResponse } },
    errors: ['NOT_FOUND'],
    async handler({ params: { bucket } }, d) {
      return { headers: { 'cache-control': 'no-store' }, body: await d.rateLimits.resume(bucket) };
    },
  }),
];
