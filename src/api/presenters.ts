import type { RunRecord, RunStatus } from '../lib/engine/record.ts';

/** `dispatched` is an internal step between queued and running; clients see it as queued. */
export function publicStatus(status: RunStatus): Exclude<RunStatus, 'dispatched'> {
  return status === 'dispatched' ? 'queued' : status;
}

/** The run as the API shows it: no lease internals, no caller memory echo. */
export function presentRun(run: RunRecord, basePath: string) {
  return {
    id: run.id,
    scope: run.scope,
    sessionId: run.sessionId,
    runtime: run.runtime,
    agent: run.agent,
    status: publicStatus(run.status),
    attempt: run.attempt,
    maxAttempts: run.maxAttempts,
    recoveries: run.recoveries,
    createdAt: iso(run.createdAt),
    updatedAt: iso(run.updatedAt),
    startedAt: iso(run.startedAt),
    finishedAt: iso(run.finishedAt),
    retryAt: iso(run.retryAt),
    cancelRequested: run.cancelRequested || undefined,
    input: run.input,
    metadata: run.metadata,
    idempotencyKey: run.idempotencyKey,
    lastError: run.lastError,
    blocked: run.blocked ? { ...run.blocked, since: iso(run.blocked.since) } : undefined,
    result: run.result,
    links: {
      self: `${basePath}/runs/${run.id}`,
      events: `${basePath}/runs/${run.id}/events`,
    },
  };
}

function iso(ms: number | undefined): string | undefined {
  return ms === undefined ? undefined : new Date(ms).toISOString();
}
