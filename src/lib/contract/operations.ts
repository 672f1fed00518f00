/**
 * Bulk operations: `POST /v1/scopes/{scope}/runs/cancel` and `/runs/rerun` act on every run a
 * filter matches, in the background, at a bounded pace (docs/run-operations.md).
 */
import type { PublicRunStatus } from './runs.ts';

export const OPERATION_KINDS = ['cancel', 'rerun'] as const;
export type OperationKind = (typeof OPERATION_KINDS)[number];

/** `running` until every matching run was acted on (`done`) or the operation was stopped (`cancelled`). */
export const OPERATION_STATUSES = ['running', 'done', 'cancelled'] as const;
export type OperationStatus = (typeof OPERATION_STATUSES)[number];

/** Which runs a bulk operation acts on: all of the fields given (at least one). */
export interface RunFilter {
  /** Statuses as runs show them: `queued` takes in runs handed to a worker queue and not yet claimed. */
  status?: PublicRunStatus[];
  agent?: string;
  runtime?: string;
  sessionId?: string;
  concurrencyKey?: string;
  /** ISO times; a run created at or after createdBefore is left out (default: the operation's creation). */
  createdBefore?: string;
  createdAfter?: string;
}

/** Body of `POST …/runs/cancel` and `POST …/runs/rerun`. */
export interface BulkRequest {
  filter: RunFilter;
  /** Re-run only: run non-idempotent steps again (RERUN_NON_IDEMPOTENT otherwise, counted as failed). */
  allowNonIdempotent?: boolean;
}

/** A bulk operation as the API shows it. */
export interface OperationView {
  id: string;
  scope: string;
  kind: OperationKind;
  status: OperationStatus;
  filter: RunFilter;
  allowNonIdempotent?: boolean;
  /** Runs found matching so far (final once the operation is done). */
  matched: number;
  /** Runs acted on: cancelled (or found ended already), or re-run. */
  done: number;
  /** Runs the action was refused for (a re-run across a non-idempotent step, a run gone). */
  failed: number;
  createdAt: string;
  finishedAt?: string;
  /** The latest refusal, for a failed count that is not 0. */
  lastError?: { runId: string; code: string; message: string };
}

/** Query of `GET …/operations`: a page of at most `limit` operations, after `cursor`. */
export interface OperationListOptions {
  /** Default 50, at most 200. */
  limit?: number;
  /** The previous page's nextCursor. */
  cursor?: string;
}

/** Answer of `GET …/operations`: a page, newest first, of at most `limit` operations and PAGE_MAX_BYTES. */
export interface OperationList {
  operations: OperationView[];
  /** Set when more operations follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`. */
  nextCursor: string | null;
}
