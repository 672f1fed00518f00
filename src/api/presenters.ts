import type { PublicRunStatus, Run, StreamToken, Wait } from '../lib/contract/runs.ts';
import type { RunStatus, ShownRun, StoredWait } from '../lib/transitions/record.ts';
import type { WaitTokens } from '../lib/engine/waits/wait-tokens.ts';
import type { MintedStreamToken, StreamGrant } from '../lib/tenancy/stream-tokens.ts';

/** `dispatched` is an internal step between queued and running; clients see it as queued. */
export function publicStatus(status: RunStatus): PublicRunStatus {
  return status === 'dispatched' ? 'queued' : status;
}

/**
 * The run as the API shows it: no lease internals, no caller memory echo. It reads only the
 * fields of SHOWN_FIELDS (record.ts), which is all a listing reads from Redis: a field shown
 * here must be added there. Every caller shows it to a key of the run's scope, the one
 * audience a wait's resume token is for: `tokens` adds them to the pending waits.
 */
export function presentRun(run: ShownRun, basePath: string, tokens?: Pick<WaitTokens, 'tokenFor'>): Run {
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
    createdAt: new Date(run.createdAt).toISOString(),
    updatedAt: new Date(run.updatedAt).toISOString(),
    startedAt: iso(run.startedAt),
    finishedAt: iso(run.finishedAt),
    retryAt: iso(run.retryAt),
    cancelRequested: run.cancelRequested || undefined,
    input: run.input,
    metadata: run.metadata,
    idempotencyKey: run.idempotencyKey,
    lastError: run.lastError,
    blocked: run.blocked ? { ...run.blocked, since: new Date(run.blocked.since).toISOString() } : undefined,
    waits: run.waits?.length ? run.waits.map((w) => presentWait(run, w, tokens)) : undefined,
    runAt: iso(run.runAt),
    ttlMs: run.ttlMs,
    timeoutMs: run.timeoutMs,
    priority: run.priority,
    concurrencyKey: run.concurrencyKey,
    onBudget: run.onBudget,
    // The record's usage is the one the step script kept: also there for a run that ended
    // without its worker (cancelled while it waited for a retry).
    result: run.result && run.usage ? { ...run.result, usage: run.usage } : run.result,
    rerunOf: run.rerunOf,
    rerunFrom: run.rerunFrom,
    rerunNonIdempotent: run.rerunNonIdempotent,
    reruns: run.reruns,
    rerunCount: run.rerunCount,
    links: {
      self: `${basePath}/runs/${run.id}`,
      events: `${basePath}/runs/${run.id}/events`,
    },
  };
}

function presentWait(run: ShownRun, w: StoredWait, tokens: Pick<WaitTokens, 'tokenFor'> | undefined): Wait {
  return {
    key: w.key,
    kind: w.kind,
    name: w.name,
    prompt: w.prompt,
    schema: w.schema,
    since: new Date(w.since).toISOString(),
    expiresAt: iso(w.expiresAt),
    // A sleep and a budget wait end by themselves: nothing to resume them with.
    token: tokens && w.kind !== 'sleep' && w.kind !== 'budget' ? tokens.tokenFor(run.scope, run.id, w.key) : undefined,
  };
}

/** A minted stream token with what it opens. */
export function presentStreamToken(minted: MintedStreamToken, grant: StreamGrant): StreamToken {
  return { token: minted.token, expiresAt: new Date(minted.expiresAt).toISOString(), ...grant };
}

function iso(ms: number | undefined): string | undefined {
  return ms === undefined ? undefined : new Date(ms).toISOString();
}
