import type { ErrorRequestHandler } from 'express';
import { ERROR_CODES } from '../lib/contract/errors.ts';
import type { BatonError } from '../lib/errors.ts';
import type { Logger } from '../lib/logger.ts';
import { toBatonError } from './error-handler.ts';
import { loggablePath } from './http-metrics.ts';
import { isOpenAiPath, UNSUPPORTED } from './openai-schemas.ts';

/**
 * Errors of the OpenAI-compatible routes in OpenAI's shape, `{ error: { message, type, param,
 * code } }` (https://platform.openai.com/docs/guides/error-codes), with the statuses the SDKs
 * map to their own classes: 400 BadRequestError, 401 AuthenticationError, 403
 * PermissionDeniedError, 404 NotFoundError, 409 ConflictError, 429 RateLimitError (with
 * Retry-After), 5xx InternalServerError. Baton's code stays readable in the message.
 */
export interface OpenAiError {
  status: number;
  headers: Record<string, string>;
  body: { error: { message: string; type: string; param: string | null; code: string | null } };
}

/** `body.input.0.content` → `input[0].content`, as OpenAI names a field. */
function paramOf(path: string | undefined): string | null {
  if (!path) return null;
  const parts = path.split('.').slice(1);
  if (parts.length === 0) return null;
  return parts.reduce((p, s) => (/^\d+$/.test(s) ? `${p}[${s}]` : p ? `${p}.${s}` : s), '');
}

export function openAiError(e: BatonError): OpenAiError {
  let status = ERROR_CODES[e.code].status;
  const detail = e.details[0];
  const headers: Record<string, string> = {};
  if (e.retryAfterMs !== undefined) headers['Retry-After'] = String(Math.max(1, Math.ceil(e.retryAfterMs / 1000)));
  if (e.code === 'UNKNOWN_AGENT') {
    return {
      status: 404, headers,
      body: { error: { message: `The model does not exist or you do not have access to it. ${e.message}`, type: 'invalid_request_error', param: 'model', code: 'model_not_found' } },
    };
  }
  if (e.code === 'UNAUTHENTICATED') headers['WWW-Authenticate'] = 'Bearer';
  // 413, 415, 422: the request is wrong; OpenAI's clients know these as 400.
  if (status >= 400 && status < 500 && ![400, 401, 403, 404, 409, 429].includes(status)) status = 400;
  const type = status === 401 ? 'invalid_request_error'
    : status === 429 ? 'rate_limit_error'
      : status >= 500 ? 'server_error' : 'invalid_request_error';
  const code = e.code === 'UNAUTHENTICATED' ? 'invalid_api_key'
    : status === 429 ? 'rate_limit_exceeded'
      : detail?.message.startsWith(UNSUPPORTED) ? 'unsupported_parameter' : e.code.toLowerCase();
  const param = paramOf(detail?.path);
  const message = !detail ? e.message
    : detail.message.startsWith(UNSUPPORTED) ? `${detail.message}.` : `Invalid '${param ?? detail.path}': ${detail.message}.`;
  return { status, headers, body: { error: { message, type, param, code } } };
}

/** The error handler of the OpenAI-compatible paths (others' errors pass on): as errorHandler logs, in OpenAI's shape. */
export function openAiErrorHandler(log: Logger): ErrorRequestHandler {
  return (err, req, res, next) => {
    if (!isOpenAiPath(req.path)) return next(err);
    const e = toBatonError(err);
    const { status, headers, body } = openAiError(e);
    const line = { method: req.method, path: loggablePath(req.path), code: e.code, status };
    if (status >= 500) log.error({ ...line, err: (err as Error)?.stack ?? String(err) }, 'request failed');
    else log.info(line, 'request rejected');
    if (res.headersSent) return void res.end();
    res.status(status).set(headers).json(body);
  };
}
