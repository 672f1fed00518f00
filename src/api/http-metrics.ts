import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';

/** Probe and scrape endpoints: logged at debug, or Prometheus would write a line every few seconds. */
const QUIET = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * Marks the mount pattern of a router (`/v1/scopes/:scope`), so the route label is the
 * template (`/v1/scopes/:scope/runs/:runId`) and never the concrete path: one series per
 * route, not one per scope or run id.
 */
export function mountTemplate(pattern: string): RequestHandler {
  return (_req, res, next) => {
    res.locals.routeMount = pattern;
    next();
  };
}

/**
 * A request's path as logs may show it: a resume token in the path of `/v1/waits/{token}` is
 * a credential, so it never reaches a log line (any spelling Express would route there).
 */
export function loggablePath(path: string): string {
  return /^\/v1\/waits\//i.test(path) ? '/v1/waits/…' : path;
}

/**
 * One histogram observation and one log line per request, when the response ends (or the
 * client goes away mid-stream). The log line carries method, route template, path, status
 * and duration, never headers or bodies, so no API key or message content reaches the logs.
 */
export function observeRequests(metrics: Metrics, log: Logger): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const start = process.hrtime.bigint();
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      const route = routeTemplate(req, res);
      const status = res.headersSent ? res.statusCode : 499;
      metrics.httpRequest(req.method, route, status, seconds);
      // The full path without its query string (req.path is relative to the router by now).
      const path = loggablePath(req.originalUrl.split('?')[0]);
      const line = { method: req.method, route, path, status, ms: Math.round(seconds * 1000) };
      if (QUIET.has(path)) log.debug(line, 'request');
      else log.info(line, 'request');
    };
    res.once('finish', finish);
    res.once('close', finish);
    next();
  };
}

/**
 * The matched route's template. A request that matched no route (404, or refused before
 * routing: auth, body parsing) is labelled with its router's mount plus `/*`, or
 * `unmatched` outside any router: bounded either way.
 */
export function routeTemplate(req: Request, res: Response): string {
  const mount = typeof res.locals.routeMount === 'string' ? res.locals.routeMount : '';
  const path = (req.route as { path?: unknown } | undefined)?.path;
  if (typeof path === 'string') return `${mount}${path}` || '/';
  return mount ? `${mount}/*` : 'unmatched';
}
