/**
 * The registry of error codes Baton answers with: each code's HTTP status and message.
 * docs/error-codes.md lists them (test/error-codes-doc.test.ts keeps both in step). Domain code
 * throws a BatonError with a code; only the API turns a code into a status.
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
  SCHEDULE_NOT_FOUND: { status: 404, message: 'No such schedule in this scope.' },
  OPERATION_NOT_FOUND: { status: 404, message: 'No such bulk operation in this scope.' },
  SESSION_BUSY: { status: 409, message: 'The session has an active or queued run.' },
  DRAINING: { status: 409, message: 'This runtime is draining in this scope; it accepts no new runs.' },
  STEP_NOT_BLOCKED: { status: 409, message: 'The run is not blocked on that step.' },
  WAIT_NOT_PENDING: { status: 409, message: 'The run has no pending wait of that key: it was resumed, timed out, is a sleep, or was never declared.' },
  IDEMPOTENCY_MISMATCH: { status: 409, message: 'This idempotencyKey was used for a different request.' },
  SESSION_HISTORY_FULL: { status: 409, message: "The session's stored history is at its size limit (HISTORY_MAX_BYTES); continue in a new session." },
  METHOD_NOT_ALLOWED: { status: 405, message: 'This path does not take that HTTP method.' },
  NOT_ACCEPTABLE: { status: 406, message: 'The Accept header must list both application/json and text/event-stream.' },
  REQUEST_TIMEOUT: { status: 408, message: 'The request body arrived too slowly.' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'The body must be application/json.' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'The body is too large.' },
  INLINE_ARTIFACTS_TOO_LARGE: { status: 413, message: 'The inline artifacts of this submit are too large together; attach some by reference.' },
  SCHEDULE_TEMPLATE_TOO_LARGE: { status: 413, message: "The schedule's run template is too large (SCHEDULE_TEMPLATE_MAX_BYTES)." },
  RATE_LIMITED: { status: 429, message: 'Too many submits for this scope; retry later.' },
  TOO_MANY_STREAMS: { status: 429, message: 'Too many open event streams; retry later.' },
  TOO_MANY_SCHEDULED_RUNS: { status: 429, message: 'This scope has as many scheduled runs pending as it may.' },
  TOO_MANY_OPERATIONS: { status: 429, message: 'This scope has as many bulk operations running as it may (BULK_OPERATIONS_MAX_PER_SCOPE).' },
  TOO_MANY_SCHEDULES: { status: 429, message: 'This scope has as many schedules as it may (SCHEDULES_MAX_PER_SCOPE).' },
  STREAM_TOKEN_RATE_LIMITED: { status: 429, message: 'Too many stream tokens minted for this scope; retry later.' },
  ARTIFACT_RATE_LIMITED: { status: 429, message: 'Too many artifact bytes uploaded for this scope; retry later.' },
  READ_RATE_LIMITED: { status: 429, message: "This scope's costly reads (history pages, listings) passed its read budget; retry later." },
  ARTIFACT_QUOTA_EXCEEDED: { status: 429, message: "This scope's stored artifacts would pass its quota; retry once some have expired." },
  SCHEMA_CHECKS_BUSY: { status: 429, message: 'Too many schema checks of this scope are waiting in this process; retry later.' },
  CLIENT_CLOSED: { status: 499, message: 'The client went away before the answer; the request was dropped and nothing was changed.' },
  REDIS_UNAVAILABLE: { status: 503, message: 'Redis is unreachable; nothing was changed.' },
  INTERNAL: { status: 500, message: 'Internal error.' },
  RUN_NOT_FINISHED: { status: 409, message: 'The run has not ended yet; it can be re-run once it has.' },
  STEP_NOT_FOUND: { status: 404, message: 'The run has no step of that key.' },
  RERUN_NON_IDEMPOTENT: { status: 409, message: 'The re-run would run non-idempotent steps again; send allowNonIdempotent: true to allow it.' },
  TURN_NOT_FOUND: { status: 404, message: "The session's committed history has no such turn." },
  SESSION_EXISTS: { status: 409, message: 'A fork needs a new session: this one has history or runs.' },
  QUEUED_RUNS_LIMIT: { status: 429, message: 'This scope has as many runs queued and not started as it may (its maxQueuedRuns).' },
  STORAGE_LIMIT: { status: 429, message: 'This scope stores as many bytes as it may (its maxStoredBytes); retry once some runs have expired.' },
  FORK_RATE_LIMITED: { status: 429, message: 'Too many forks, or bytes forked, for this scope; retry later.' },
  UNKNOWN_AGENT: {
    status: 422,
    message: 'No worker of this runtime offered that agent in the last day; send awaitAgent: true to queue the run until one does.',
  },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface ErrorDetail {
  path: string;
  message: string;
}

/** Every error answer: `{ error: { code, message, details } }`. */
export interface ErrorBody { error: { code: ErrorCode; message: string; details: ErrorDetail[] } }
