import { isRedisUnavailable } from '../redis/errors.ts';
import { isPermanentError, isRetryAfterError, isTransientError } from './errors.ts';

export type Classified =
  | { kind: 'transient'; code: string; message: string; retryAfterMs?: number }
  | { kind: 'permanent'; code: string; message: string; details?: unknown };

const TRANSIENT_NET_CODES = new Set([
  'ECONNRESET', 'ECONNREFUSED', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'ENETUNREACH',
  'EHOSTUNREACH', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT',
]);

/** HTTP statuses a provider answers when trying again later can succeed. */
export function isTransientStatus(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** Parses a Retry-After header (seconds or an HTTP date) into ms; undefined when absent or invalid. */
export function parseRetryAfter(value: string | null | undefined): number | undefined {
  if (!value) return undefined;
  const secs = Number(value);
  if (Number.isFinite(secs) && secs >= 0) return secs * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/**
 * Classifies an agent failure by type, never by message: Baton's error types first (by brand,
 * so another copy's classes count), then HTTP errors carrying a numeric `status` (provider
 * SDKs), then Node network errors and timeouts. Anything else is permanent: retrying an
 * unknown bug only repeats it.
 *
 * Never throws: an agent may throw anything (`Object.create(null)`, a Proxy, an object whose
 * `message` getter throws), and a classification that threw would leave its run leased, to
 * be taken over into the same throw again and again.
 */
export function classify(err: unknown): Classified {
  try {
    return classifyReadable(err);
  } catch {
    return { kind: 'permanent', code: 'AGENT_ERROR', message: 'the agent threw a value that cannot be read as an error' };
  }
}

function classifyReadable(err: unknown): Classified {
  const e = err as { name?: string; message?: string; code?: unknown; status?: unknown; headers?: unknown; cause?: unknown };
  const message = String(e?.message ?? err);
  if (isRetryAfterError(err)) return { kind: 'transient', code: err.code, message, retryAfterMs: err.retryAfterMs };
  if (isTransientError(err)) return { kind: 'transient', code: err.code, message };
  if (isPermanentError(err)) {
    return { kind: 'permanent', code: err.code, message, details: (err as { errors?: unknown }).errors };
  }
  if (typeof e?.status === 'number') {
    const code = `HTTP_${e.status}`;
    if (!isTransientStatus(e.status)) return { kind: 'permanent', code, message };
    return { kind: 'transient', code, message, retryAfterMs: retryAfterOf(e.headers) };
  }
  if (e?.name === 'TimeoutError') return { kind: 'transient', code: 'TIMEOUT', message };
  // ioredis gives up on a command while Redis is unreachable (a restart, a failover): Baton's
  // own step writes and history reads inside an attempt, or an agent's Redis. Redis comes
  // back; the chaos soak saw runs fail for good here before this line.
  if (isRedisUnavailable(err)) return { kind: 'transient', code: 'REDIS_UNAVAILABLE', message };
  const netCode = networkCode(err);
  if (netCode) return { kind: 'transient', code: netCode, message };
  return { kind: 'permanent', code: e?.name && e.name !== 'Error' ? e.name : 'AGENT_ERROR', message };
}

/**
 * A Node network error code on the error or down its `cause` chain: fetch wraps the socket
 * error (`TypeError: fetch failed` → cause `{ code: 'ECONNRESET' }`), and SDKs wrap that again.
 */
function networkCode(err: unknown): string | undefined {
  let e = err as { code?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; depth < 5 && e && typeof e === 'object'; depth++) {
    if (typeof e.code === 'string' && TRANSIENT_NET_CODES.has(e.code)) return e.code;
    e = e.cause as typeof e;
  }
  return undefined;
}

/** Retry-After in ms: OpenAI-style `retry-after-ms` first (finer), then the standard header. */
function retryAfterOf(headers: unknown): number | undefined {
  const ms = headerOf(headers, 'retry-after-ms');
  if (ms && Number.isFinite(Number(ms)) && Number(ms) >= 0) return Number(ms);
  return parseRetryAfter(headerOf(headers, 'retry-after'));
}

function headerOf(headers: unknown, name: string): string | undefined {
  if (!headers) return undefined;
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const v = (headers as Record<string, unknown>)[name];
  return typeof v === 'string' ? v : undefined;
}

/**
 * Delay before attempt `attempt + 1`: exponential backoff with full jitter (uniform in
 * [0, min(max, base * 2^(attempt-1))]), so retries of many runs hit by one outage spread
 * out instead of returning together. A provider's Retry-After wins when given.
 */
export function backoffMs(attempt: number, baseMs: number, maxMs: number, retryAfterMs?: number, random = Math.random): number {
  // A provider's (or an agent's) hint that is not a number is no hint: a NaN delay would make
  // the retry transition fail and the run be recovered over and over.
  if (retryAfterMs !== undefined && Number.isFinite(retryAfterMs)) return Math.min(Math.max(0, retryAfterMs), 3600_000);
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(random() * ceiling);
}
