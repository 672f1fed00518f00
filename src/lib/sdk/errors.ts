/** Errors that steer retries. Agents throw these; the executor classifies them by type, never by message. */

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
