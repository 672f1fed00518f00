import { BatonApiError, describeError, TERMINAL_STATUSES, type Api, type BulkFilter, type OperationKind, type Run, type RunFilter } from './api.ts';

const ended = (status: string) => (TERMINAL_STATUSES as readonly string[]).includes(status);

/** What each kind of action does, in the words the page uses for it. */
export const VERB: Record<OperationKind, { done: string; action: string }> = {
  cancel: { done: 'Cancelled', action: 'Cancel' },
  rerun: { done: 'Re-ran', action: 'Re-run' },
};

/**
 * The bulk operation's filter for the runs page's filter, or the sentence saying why the API
 * would refuse it: the API needs a filter, a cancel acts only on runs that have not ended and a
 * re-run only on ended ones. `createdBefore` is now, so runs submitted after the reader looked
 * at the page are left alone.
 */
export function bulkFilterOf(kind: OperationKind, page: RunFilter, now: Date): { filter: BulkFilter } | { refusal: string } {
  const { status, sessionId, agent, runtime } = page;
  if (!status && !sessionId && !agent && !runtime) {
    return { refusal: 'Filter the runs first (by status, session, agent or runtime): an action on every run of the scope is not offered.' };
  }
  if (kind === 'cancel' && status && ended(status)) {
    return { refusal: `Runs that are ${status} have ended: there is nothing to cancel. Filter by a status that has not ended, or by none.` };
  }
  if (kind === 'rerun' && status && !ended(status)) {
    return { refusal: `A re-run acts on ended runs (${TERMINAL_STATUSES.join(', ')}); runs that are ${status} have not ended.` };
  }
  const filter: BulkFilter = { createdBefore: now.toISOString() };
  if (status) filter.status = [status as NonNullable<BulkFilter['status']>[number]];
  if (sessionId) filter.sessionId = sessionId;
  if (agent) filter.agent = agent;
  if (runtime) filter.runtime = runtime;
  return { filter };
}

/** A bulk filter as a phrase: "status queued, agent triage, created before 10:02:03". */
export function describeFilter(f: BulkFilter, formatTime: (iso: string) => string): string {
  const parts: string[] = [];
  if (f.status) parts.push(`status ${f.status.join(' or ')}`);
  if (f.sessionId) parts.push(`session ${f.sessionId}`);
  if (f.agent) parts.push(`agent ${f.agent}`);
  if (f.runtime) parts.push(`runtime ${f.runtime}`);
  if (f.concurrencyKey) parts.push(`concurrency key ${f.concurrencyKey}`);
  if (f.createdAfter) parts.push(`created from ${formatTime(f.createdAfter)}`);
  if (f.createdBefore) parts.push(`created before ${formatTime(f.createdBefore)}`);
  return parts.join(', ');
}

/** How one selected run fared: acted on, or refused with the reason. */
export type RunOutcome = { runId: string; ok: true } | { runId: string; ok: false; reason: string };

/** Per-run calls, this many under way at once: a few, so a page of 200 neither waits long nor floods the API. */
const AT_ONCE = 4;

/**
 * Cancels or re-runs each of `runs`, a few at a time, and says how each fared. A cancel of a
 * run that had ended answers the run unchanged: that is a refusal here, not a success.
 */
export async function actOnRuns(api: Api, kind: OperationKind, runs: Run[]): Promise<RunOutcome[]> {
  const outcomes: RunOutcome[] = new Array(runs.length);
  let next = 0;
  const lane = async () => {
    while (next < runs.length) {
      const i = next++;
      outcomes[i] = await actOnRun(api, kind, runs[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, runs.length) }, lane));
  return outcomes;
}

async function actOnRun(api: Api, kind: OperationKind, run: Run): Promise<RunOutcome> {
  const runId = run.id;
  try {
    if (kind === 'rerun') {
      await api.rerun(runId);
      return { runId, ok: true };
    }
    // A run cancelled before this call was not cancelled by it.
    if (run.status === 'cancelled') return { runId, ok: false, reason: 'it was cancelled already' };
    const after = await api.cancel(runId);
    if (after.status !== 'cancelled' && ended(after.status)) return { runId, ok: false, reason: `it had ended (${after.status}): nothing to cancel` };
    return { runId, ok: true };
  } catch (err) {
    return { runId, ok: false, reason: refusalOf(err) };
  }
}

/** The API's refusal with what it names: the steps of RERUN_NON_IDEMPOTENT, the fields of a 400. */
function refusalOf(err: unknown): string {
  if (!(err instanceof BatonApiError) || err.details.length === 0) return describeError(err);
  return `${describeError(err)}: ${err.details.map((d) => d.message).join('; ')}`;
}
