/**
 * The registry of error codes Baton returns. Every API error carries one of these codes,
 * its HTTP status and a message; README.md lists them (a test keeps both in step).
 */
export const ERROR_CODES = {
  VALIDATION_FAILED: { status: 400, message: 'The request is invalid.' },
  INVALID_JSON: { status: 400, message: 'The body is not valid JSON.' },
  CALLER_MEMORY_INVALID: { status: 400, message: 'memory must be a JSON value other than null.' },
  OUTPUT_SCHEMA_INVALID: { status: 400, message: 'outputSchema is not a valid JSON Schema.' },
  ARTIFACT_NOT_FOUND: { status: 400, message: 'input.artifacts names an artifact this scope does not have.' },
  UNAUTHENTICATED: { status: 401, message: 'A valid API key is required.' },
  FORBIDDEN: { status: 403, message: "This key's role may not do that." },
  NOT_FOUND: { status: 404, message: 'Not found.' },
  RUN_NOT_FOUND: { status: 404, message: 'No such run in this scope.' },
  SESSION_BUSY: { status: 409, message: 'The session has an active or queued run.' },
  DRAINING: { status: 409, message: 'This runtime is draining in this scope; it accepts no new runs.' },
  STEP_NOT_BLOCKED: { status: 409, message: 'The run is not blocked on that step.' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'The body must be application/json.' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'The body is too large.' },
  UNKNOWN_AGENT: { status: 422, message: "The runtime's live workers do not offer this agent." },
  RATE_LIMITED: { status: 429, message: 'Too many submits for this scope; retry later.' },
  REDIS_UNAVAILABLE: { status: 503, message: 'Redis is unreachable; nothing was changed.' },
  INTERNAL: { status: 500, message: 'Internal error.' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface ErrorDetail {
  path: string;
  message: string;
}

/** An error the API answers with its code's status; `details` names the failing fields. */
export class BatonError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly details: ErrorDetail[] = [],
    readonly headers: Record<string, string> = {},
  ) {
    super(message ?? ERROR_CODES[code].message);
    this.name = 'BatonError';
    this.status = ERROR_CODES[code].status;
  }
}

// ---- Errors that steer retries. Agents throw these; the executor classifies by type. ----

/** Worth another attempt (network blip, timeout, provider overload). */
export class TransientError extends Error {
  constructor(message: string, readonly code = 'TRANSIENT', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TransientError';
  }
}

/** Transient, and the provider said when to come back. */
export class RetryAfterError extends TransientError {
  readonly retryAfterMs: number;
  constructor(message: string, after: number | Date, options?: { cause?: unknown }) {
    super(message, 'RETRY_AFTER', options);
    this.name = 'RetryAfterError';
    this.retryAfterMs = after instanceof Date ? Math.max(0, after.getTime() - Date.now()) : Math.max(0, after);
  }
}

/** Never retried: the same input would fail the same way. */
export class PermanentError extends Error {
  constructor(message: string, readonly code = 'PERMANENT', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/** The run's final answer failed its submit's outputSchema. Permanent. */
export class OutputInvalidError extends PermanentError {
  constructor(readonly errors: unknown[]) {
    super('The answer does not match outputSchema.', 'OUTPUT_INVALID');
    this.name = 'OutputInvalidError';
  }
}
