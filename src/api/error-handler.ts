import type { ErrorRequestHandler } from 'express';
import { ERROR_CODES } from '../lib/contract/errors.ts';
import { BatonError } from '../lib/errors.ts';
import type { Logger } from '../lib/logger.ts';
import { loggablePath } from './http-metrics.ts';
import { isRedisUnavailable } from '../lib/redis/redis.ts';

/** Maps every error to `{ error: { code, message, details } }`; 5xx logged at error, 4xx at info. */
export function errorHandler(log: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const e = toBatonError(err);
    const status = ERROR_CODES[e.code].status;
    const line = { method: req.method, path: loggablePath(req.path), code: e.code, status };
    if (status >= 500) log.error({ ...line, err: (err as Error)?.stack ?? String(err) }, 'request failed');
    else log.info(line, 'request rejected');
    if (res.headersSent) {
      res.end();
      return;
    }
    res.status(status).set(headersFor(e)).json({ error: { code: e.code, message: e.message, details: e.details } });
  };
}

/** RFC 6750: a 401 names the scheme it wants; a 429 or 503 says when to come back (whole seconds, rounded up). */
function headersFor(e: BatonError): Record<string, string> {
  const h: Record<string, string> = {};
  if (e.code === 'UNAUTHENTICATED') h['WWW-Authenticate'] = 'Bearer';
  if (e.retryAfterMs !== undefined) h['Retry-After'] = String(Math.max(1, Math.ceil(e.retryAfterMs / 1000)));
  return h;
}

export function toBatonError(err: unknown): BatonError {
  if (err instanceof BatonError) return err;
  const e = err as { type?: string; name?: string; code?: string; message?: string };
  if (e?.type === 'entity.parse.failed') return new BatonError('INVALID_JSON', undefined, [{ path: 'body', message: 'not valid JSON' }]);
  if (e?.type === 'entity.too.large') return new BatonError('PAYLOAD_TOO_LARGE');
  if (e?.type === 'charset.unsupported' || e?.type === 'encoding.unsupported') return new BatonError('UNSUPPORTED_MEDIA_TYPE');
  if (isRedisUnavailable(err)) return new BatonError('REDIS_UNAVAILABLE');
  const client = clientError(err);
  if (client) return client;
  return new BatonError('INTERNAL', ERROR_CODES.INTERNAL.message);
}

/**
 * Express, the router and body-parser refuse some requests before any route runs (a path
 * segment that is not valid percent-encoding, a Content-Encoding nobody can inflate, a body
 * shorter than its Content-Length) with a 4xx http-error. Those are the client's fault and
 * get a registered code, never a 500.
 */
function clientError(err: unknown): BatonError | undefined {
  const e = err as { status?: unknown; statusCode?: unknown; type?: unknown; message?: unknown };
  const status = Number(e?.status ?? e?.statusCode);
  if (!Number.isInteger(status) || status < 400 || status >= 500) return undefined;
  if (status === 413) return new BatonError('PAYLOAD_TOO_LARGE');
  if (status === 415) return new BatonError('UNSUPPORTED_MEDIA_TYPE');
  const where = err instanceof URIError ? 'path' : 'body';
  return new BatonError('VALIDATION_FAILED', undefined, [{ path: where, message: String(e.message ?? 'malformed request') }]);
}
