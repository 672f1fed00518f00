import type { ErrorCode, ErrorDetail } from './contract/errors.ts';
import { ERROR_CODES } from './contract/errors.ts';

export type { ErrorCode, ErrorDetail };

/**
 * A refusal the domain reports with one of the public error codes (contract/errors.ts);
 * `details` names the failing fields. It carries no HTTP status: the API maps codes to
 * statuses (and `retryAfterMs` to a Retry-After header) in one place.
 */
export class BatonError extends Error {
  readonly retryAfterMs: number | undefined;
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly details: ErrorDetail[] = [],
    options: { retryAfterMs?: number } = {},
  ) {
    super(message ?? ERROR_CODES[code].message);
    this.name = 'BatonError';
    this.retryAfterMs = options.retryAfterMs;
  }
}
