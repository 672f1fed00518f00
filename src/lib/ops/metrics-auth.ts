import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * Whether a scrape may read /metrics: always without a METRICS_TOKEN, else only with
 * `Authorization: Bearer <token>`, compared in constant time (over digests, so the lengths
 * tell nothing either).
 */
export function metricsAuthorized(authorization: string | undefined, token: string | undefined): boolean {
  if (token === undefined) return true;
  if (authorization === undefined || !authorization.startsWith('Bearer ')) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(authorization.slice('Bearer '.length)), digest(token));
}
