/**
 * Errors that steer retries. Agents throw these; the executor classifies them by type, never by message.
 *
 * A type is recognised by its brand, a registered symbol (`Symbol.for('baton.error.<Name>')`)
 * on the class's prototype, not by the class object: an agent module that bundles its own
 * copy of baton-agents throws its copy's classes, and the worker classifies them as its own.
 * `instanceof` on these classes checks the brand too, so an agent catching the worker's
 * WaitTimeoutError with its copy's class still catches it. Subclasses inherit the brands of
 * their bases; a subclass written elsewhere keeps the ordinary `instanceof` for itself.
 */

type BrandedName = 'TransientError' | 'RetryAfterError' | 'PermanentError' | 'WaitTimeoutError' | 'ToolDeclinedError';

/** Whether `value` carries the brand `name`, own or inherited. Never throws (a Proxy may refuse reads). */
function hasBrand(value: unknown, name: BrandedName): boolean {
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return false;
  try {
    return (value as Record<symbol, unknown>)[Symbol.for(`baton.error.${name}`)] === true;
  } catch {
    return false;
  }
}

/**
 * Marks `cls`'s instances with the brand `name` (a non-enumerable, read-only prototype
 * property) and makes `instanceof cls` check the brand. A subclass defined elsewhere inherits
 * this `Symbol.hasInstance` but gets the ordinary prototype check for itself.
 */
function brand(cls: abstract new (...args: never[]) => unknown, name: BrandedName): void {
  Object.defineProperty(cls.prototype, Symbol.for(`baton.error.${name}`), { value: true });
  Object.defineProperty(cls, Symbol.hasInstance, {
    value(this: unknown, value: unknown): boolean {
      return this === cls ? hasBrand(value, name) : Function.prototype[Symbol.hasInstance].call(this, value);
    },
  });
}

/** Worth another attempt (network blip, timeout, provider overload). */
export class TransientError extends Error {
  constructor(message: string, readonly code = 'TRANSIENT', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TransientError';
  }

  static {
    brand(this, 'TransientError');
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

  static {
    brand(this, 'RetryAfterError');
  }
}

/** Never retried: the same input would fail the same way. */
export class PermanentError extends Error {
  constructor(message: string, readonly code = 'PERMANENT', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }

  static {
    brand(this, 'PermanentError');
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

  static {
    brand(this, 'WaitTimeoutError');
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

  static {
    brand(this, 'ToolDeclinedError');
  }
}

/** Type guards by brand: true for an error of the type (or a subtype) from any copy of this module. */
export function isTransientError(err: unknown): err is TransientError {
  return hasBrand(err, 'TransientError');
}

export function isRetryAfterError(err: unknown): err is RetryAfterError {
  return hasBrand(err, 'RetryAfterError');
}

export function isPermanentError(err: unknown): err is PermanentError {
  return hasBrand(err, 'PermanentError');
}

export function isWaitTimeoutError(err: unknown): err is WaitTimeoutError {
  return hasBrand(err, 'WaitTimeoutError');
}

export function isToolDeclinedError(err: unknown): err is ToolDeclinedError {
  return hasBrand(err, 'ToolDeclinedError');
}
