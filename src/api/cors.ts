import type { RequestHandler } from 'express';

/**
 * Preflights a browser caches (s): one per page and route for ten minutes instead of one
 * before every reconnect. Chromium caps this at 2 h anyway.
 */
const PREFLIGHT_MAX_AGE_S = 600;

/**
 * CORS for one route a page on another origin may call (those a stream token opens), run
 * for every method of its path before authentication. An origin in `origins` (CORS_ORIGINS)
 * gets `Access-Control-Allow-Origin` on every answer, errors included, so the page can read
 * a 401 as a 401; any other origin gets no CORS header at all, and its browser keeps the
 * answer from the page. `OPTIONS` is the preflight: 204, with the method and the one header
 * a reconnecting EventSource adds (Last-Event-ID) allowed for a listed origin, or the `headers`
 * the route names (a chat page's fetch sends Authorization and Content-Type). Credentials
 * (cookies) are never allowed: a token travels in the URL. Helmet's headers are left as set.
 */
export function corsFor(origins: readonly string[], method: string, headers: readonly string[] = ['Last-Event-ID']): RequestHandler {
  const allowed = new Set(origins);
  return (req, res, next) => {
    res.vary('Origin');
    const origin = req.headers.origin;
    const listed = origin !== undefined && allowed.has(origin);
    if (listed) res.set('Access-Control-Allow-Origin', origin);
    if (req.method !== 'OPTIONS') return next();
    res.set('Allow', `${method.toUpperCase()}, OPTIONS`);
    if (listed && req.headers['access-control-request-method'] !== undefined) {
      res.set({
        'Access-Control-Allow-Methods': method.toUpperCase(),
        'Access-Control-Allow-Headers': headers.join(', '),
        'Access-Control-Max-Age': String(PREFLIGHT_MAX_AGE_S),
      });
    }
    res.status(204).end();
  };
}
