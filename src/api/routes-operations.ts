import { z } from 'zod';
import { OPERATION_KINDS, OPERATION_STATUSES, PUBLIC_RUN_STATUSES, TERMINAL_STATUSES, type OperationKind } from '../lib/contract/index.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { emptyBody, idSchema, listRunsQuery, scopeParams, submitBody } from './schemas.ts';

/**
 * Bulk operations (src/lib/engine/operations/bulk-operations.ts; docs/run-operations.md): cancel or re-run
 * every run of the scope a filter matches, in the background at a bounded pace. They act on
 * many runs at once, so an admin key of the scope starts and stops one; any key reads them.
 */

export const operationParams = z.strictObject({ scope: idSchema, operationId: idSchema });

const iso = z.iso.datetime({ offset: true });

const runFilter = z.strictObject({
  status: z.array(z.enum(PUBLIC_RUN_STATUSES)).min(1).max(PUBLIC_RUN_STATUSES.length).optional()
    .describe('statuses as runs show them (`queued` takes in runs handed to a worker queue and not yet claimed)'),
  agent: idSchema.optional(),
  runtime: idSchema.optional(),
  sessionId: idSchema.optional(),
  concurrencyKey: submitBody.shape.concurrencyKey,
  createdBefore: iso.optional().describe('runs created before this time (default: when the operation is made)'),
  createdAfter: iso.optional().describe('runs created at or after this time'),
}).refine((f) => Object.values(f).some((v) => v !== undefined), { message: 'give at least one filter field' });

const bulkBody = (kind: OperationKind) => z.strictObject({
  filter: runFilter,
  allowNonIdempotent: z.boolean().optional().describe('re-run only: run non-idempotent steps again (else such runs count as failed)'),
}).superRefine((b, ctx) => {
  if (kind === 'cancel' && b.allowNonIdempotent !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['allowNonIdempotent'], message: 'only a re-run takes allowNonIdempotent' });
  }
  const ended: readonly string[] = TERMINAL_STATUSES;
  if (kind === 'rerun' && b.filter.status?.some((s) => !ended.includes(s))) {
    ctx.addIssue({ code: 'custom', path: ['filter', 'status'], message: `a re-run acts on ended runs: ${TERMINAL_STATUSES.join(', ')}` });
  }
  if (kind === 'cancel' && b.filter.status?.some((s) => ended.includes(s))) {
    ctx.addIssue({ code: 'custom', path: ['filter', 'status'], message: `a cancel acts on runs that have not ended: not ${TERMINAL_STATUSES.join(', ')}` });
  }
});

const operationResponse = z.object({
  id: z.string(),
  scope: z.string(),
  kind: z.enum(OPERATION_KINDS),
  status: z.enum(OPERATION_STATUSES),
  filter: z.object({
    status: z.array(z.enum(PUBLIC_RUN_STATUSES)).optional(), agent: z.string().optional(), runtime: z.string().optional(),
    sessionId: z.string().optional(), concurrencyKey: z.string().optional(),
    createdBefore: z.string().optional(), createdAfter: z.string().optional(),
  }),
  allowNonIdempotent: z.boolean().optional(),
  matched: z.number().int().describe('runs found matching so far (final once done)'),
  done: z.number().int().describe('runs cancelled (or found ended already) or re-run'),
  failed: z.number().int().describe('runs the action was refused for'),
  createdAt: z.string(),
  finishedAt: z.string().optional(),
  lastError: z.object({ runId: z.string(), code: z.string(), message: z.string() }).optional(),
});

const noStore = { 'cache-control': 'no-store' };

const bulkRoute = (kind: OperationKind) => route({
  method: 'post', path: `${SCOPE}/runs/${kind}`,
  summary: kind === 'cancel'
    ? 'Cancel every run the filter matches, in the background (an admin key): answers the operation to follow.'
    : 'Re-run every ended run the filter matches, each once, in the background (an admin key): answers the operation to follow.',
  access: 'admin', params: scopeParams, body: bulkBody(kind),
  ok: { 202: { description: 'the operation, running', schema: operationResponse } },
  errors: ['TOO_MANY_OPERATIONS'],
  async handler({ params: { scope }, body }, d) {
    return { status: 202, headers: noStore, body: await d.operations.create(scope, kind, body) };
  },
});

/** GET …/operations: a page of at most `limit` operations after `cursor` (the runs listing's count range and cursor form). */
export const listOperationsQuery = z.strictObject({
  limit: listRunsQuery.shape.limit,
  /** The previous page's nextCursor: `<creation ms>_<operation id>` of its last operation. */
  cursor: listRunsQuery.shape.cursor,
});

export const operationListResponse = z.object({
  operations: z.array(operationResponse),
  nextCursor: z.string().nullable().describe('set when more operations follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`'),
});

export const operationRoutes: RouteSpec[] = [
  bulkRoute('cancel'),
  bulkRoute('rerun'),
  route({
    method: 'get', path: `${SCOPE}/operations`,
    summary: "The scope's bulk operations, newest first (ended ones for 7 days): a page of at most `limit` and PAGE_MAX_BYTES.",
    access: 'client', params: scopeParams, query: listOperationsQuery, readCost: true,
    ok: { 200: { description: 'a page of operations', schema: operationListResponse } },
    async handler({ params: { scope }, query }, d) {
      return { headers: noStore, body: await d.operations.list(scope, query) };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/operations/:operationId`, summary: 'A bulk operation and its progress.',
    access: 'client', params: operationParams,
    ok: { 200: { description: 'the operation', schema: operationResponse } }, errors: ['OPERATION_NOT_FOUND'],
    async handler({ params: { scope, operationId } }, d) {
      return { headers: noStore, body: await d.operations.get(scope, operationId) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/operations/:operationId/cancel`,
    summary: 'Stop a bulk operation: no batch starts after this; what it did stays done.',
    access: 'admin', params: operationParams, body: emptyBody,
    ok: { 200: { description: 'the operation, cancelled (or ended already)', schema: operationResponse } }, errors: ['OPERATION_NOT_FOUND'],
    async handler({ params: { scope, operationId } }, d) {
      return { headers: noStore, body: await d.operations.cancel(scope, operationId) };
    },
  }),
];
