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

/**
 * Thrown by ctx.waitFor when the wait's timeoutMs passed before anyone resumed it. Permanent
 * if the agent lets it through (the run fails with WAIT_TIMEOUT); catch it to go on without.
 */
export class WaitTimeoutError extends PermanentError {
  constructor(readonly waitName: string, readonly waitKey: string) {
    super(`the wait ${waitKey} timed out before it was resumed`, 'WAIT_TIMEOUT');
    this.name = 'WaitTimeoutError';
  }
}

/**
 * Thrown by ctx.tool when a person declined a call of an approval-gated tool: the tool did not
 * run. The agent decides what follows: tell the model (createChatAgent and baton/ai do), or
 * let it fail the run (TOOL_DECLINED).
 */
export class ToolDeclinedError extends PermanentError {
  constructor(readonly tool: string, readonly reason: string | undefined) {
    super(reason ? `the call of ${tool} was declined: ${reason}` : `the call of ${tool} was declined`, 'TOOL_DECLINED');
    this.name = 'ToolDeclinedError';
  }
}
