import { BatonApiError, type Run as ClientRun } from '../../lib/client/client.ts';
import type {
  BulkRequest, CreateScheduleRequest, LimitField, OperationKind, OperationList, OperationView, RunUsage, RuntimeStats, RuntimeView,
  ScheduleList, ScheduleView, ScopeLimits, ScopeLimitsView, SessionMessage, Step, Wait, WhoAmI,
} from '../../lib/contract/index.ts';
import { uiRoot } from './router.ts';

export { BatonApiError };
export { ID_PATTERN, ID_RULE } from '../../lib/contract/ids.ts';
export { LIMIT_FIELDS } from '../../lib/contract/admin.ts';
export { TERMINAL_STATUSES } from '../../lib/contract/runs.ts';
export { MISSED_TICK_POLICIES, type MissedTickPolicy } from '../../lib/contract/schedules.ts';
export type {
  BulkRequest, CreateScheduleRequest, LimitField, OperationKind, OperationView, RunUsage, RuntimeStats, ScheduleView, ScopeLimits,
  ScopeLimitsView, Step, Wait,
};
/** The filter of a bulk operation (statuses as a list, creation times), as against the runs page's RunFilter. */
export type { RunFilter as BulkFilter } from '../../lib/contract/operations.ts';
/** What GET /v1/whoami says about the key the inspector holds: `scope` is null for an operator key. */
export type Identity = WhoAmI;
/** A PUT of a scope's limits: the operator's whole override set (a field absent: its default; null: none). */
export type LimitOverrides = Partial<ScopeLimits>;
export type Message = SessionMessage;
export type Runtime = RuntimeView;

/** A run as the API shows it; a status this page does not know (a newer server's) is shown as it comes. */
export type Run = Omit<ClientRun, 'status'> & { status: string };

export interface RunFilter {
  status?: string;
  sessionId?: string;
  agent?: string;
  runtime?: string;
}

/**
 * Where the API is: the inspector is served at `<api>/ui/`, the page's base URL (the API
 * sets it, see uiRoot), so the API is the folder above it, whatever path that is.
 */
export function apiBase(doc: Document = document): string {
  return new URL('..', uiRoot(doc)).href.replace(/\/$/, '');
}

async function request<T>(base: string, key: string, method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, accept: 'application/json' };
  const init: RequestInit = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(base + path, init);
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!res.ok) {
    const e = (parsed as { error?: { code?: string; message?: string; details?: { path: string; message: string }[] } })?.error;
    throw new BatonApiError(res.status, e?.code ?? `HTTP_${res.status}`, e?.message ?? (text.slice(0, 200) || res.statusText), e?.details);
  }
  return parsed as T;
}

/**
 * Asks the API whose key this is: a key of a scope (its runs, runtimes and, for its admin, its
 * limits), or an operator key, bound to no scope, which reads and sets any scope's limits only.
 */
export function whoami(base: string, key: string): Promise<Identity> {
  return request<WhoAmI>(base, key, 'GET', '/v1/whoami');
}

/**
 * The REST calls the inspector makes, all on the public API for one scope: the key's own, or,
 * for an operator key, the scope whose limits the reader picked.
 * `onUnauthorized` fires on any 401 (a revoked key): the app then asks for a key again.
 */
export class Api {
  constructor(
    readonly base: string,
    readonly key: string,
    readonly scope: string,
    private readonly onUnauthorized: () => void = () => {},
  ) {}

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    try {
      return await request<T>(this.base, this.key, method, `/v1/scopes/${this.scope}${path}`, body);
    } catch (err) {
      if (err instanceof BatonApiError && err.status === 401) this.onUnauthorized();
      throw err;
    }
  }

  runs(filter: RunFilter, limit: number): Promise<{ runs: Run[]; nextCursor: string | null }> {
    const q = new URLSearchParams({ limit: String(limit) });
    for (const [k, v] of Object.entries(filter)) if (v) q.set(k, v);
    return this.call('GET', `/runs?${q}`);
  }

  run(runId: string): Promise<Run> {
    return this.call('GET', `/runs/${encodeURIComponent(runId)}`);
  }

  async steps(runId: string): Promise<Step[]> {
    return (await this.call<{ steps: Step[] }>('GET', `/runs/${encodeURIComponent(runId)}/steps`)).steps;
  }

  /** The run's model usage so far, and its cost where the API has a price for every model it called. */
  usage(runId: string): Promise<RunUsage> {
    return this.call('GET', `/runs/${encodeURIComponent(runId)}/usage`);
  }

  cancel(runId: string): Promise<Run> {
    return this.call('POST', `/runs/${encodeURIComponent(runId)}/cancel`, {});
  }

  /** A new run repeating an ended one from its start (RERUN_NON_IDEMPOTENT when that would run such a step again). */
  rerun(runId: string): Promise<Run> {
    return this.call('POST', `/runs/${encodeURIComponent(runId)}/rerun`, {});
  }

  /** Starts a bulk cancel or re-run of every run `body.filter` matches (an admin key): the operation, running. */
  startOperation(kind: OperationKind, body: BulkRequest): Promise<OperationView> {
    return this.call('POST', `/runs/${kind}`, body);
  }

  /** The scope's bulk operations, newest first. */
  async operations(limit: number): Promise<OperationView[]> {
    return (await this.call<OperationList>('GET', `/operations?limit=${limit}`)).operations;
  }

  operation(operationId: string): Promise<OperationView> {
    return this.call('GET', `/operations/${encodeURIComponent(operationId)}`);
  }

  /** Stops a bulk operation (an admin key): no batch starts after this; what it did stays done. */
  stopOperation(operationId: string): Promise<OperationView> {
    return this.call('POST', `/operations/${encodeURIComponent(operationId)}/cancel`, {});
  }

  /** A page of the scope's schedules, oldest first, each with its next five fire times; `cursor` is a page's nextCursor. */
  schedules(limit: number, cursor?: string): Promise<ScheduleList> {
    const q = new URLSearchParams({ limit: String(limit) });
    if (cursor) q.set('cursor', cursor);
    return this.call('GET', `/schedules?${q}`);
  }

  createSchedule(body: CreateScheduleRequest): Promise<ScheduleView> {
    return this.call('POST', '/schedules', body);
  }

  pauseSchedule(scheduleId: string): Promise<ScheduleView> {
    return this.call('POST', `/schedules/${encodeURIComponent(scheduleId)}/pause`, {});
  }

  resumeSchedule(scheduleId: string): Promise<ScheduleView> {
    return this.call('POST', `/schedules/${encodeURIComponent(scheduleId)}/resume`, {});
  }

  deleteSchedule(scheduleId: string): Promise<void> {
    return this.call('DELETE', `/schedules/${encodeURIComponent(scheduleId)}`);
  }

  resolve(runId: string, stepKey: string, resolution: { value: unknown } | { rerun: true }): Promise<Run> {
    return this.call('POST', `/runs/${encodeURIComponent(runId)}/steps/${encodeURIComponent(stepKey)}/resolve`, resolution);
  }

  resumeWait(runId: string, waitKey: string, value: unknown): Promise<unknown> {
    return this.call('POST', `/runs/${encodeURIComponent(runId)}/waits/${encodeURIComponent(waitKey)}`, { value });
  }

  messages(sessionId: string, cursor?: string): Promise<{ messages: Message[]; nextCursor: string | null }> {
    const q = new URLSearchParams({ limit: '500' });
    if (cursor) q.set('cursor', cursor);
    return this.call('GET', `/sessions/${encodeURIComponent(sessionId)}/messages?${q}`);
  }

  async runtimes(): Promise<Runtime[]> {
    return (await this.call<{ runtimes: Runtime[] }>('GET', '/runtimes')).runtimes;
  }

  stats(runtimeId: string): Promise<RuntimeStats> {
    return this.call('GET', `/runtimes/${encodeURIComponent(runtimeId)}/stats`);
  }

  drain(runtimeId: string, cancelQueued: boolean): Promise<{ cancelled: number }> {
    return this.call('POST', `/runtimes/${encodeURIComponent(runtimeId)}/drain`, { cancelQueued });
  }

  resume(runtimeId: string): Promise<{ resumed: number }> {
    return this.call('DELETE', `/runtimes/${encodeURIComponent(runtimeId)}/drain`, {});
  }

  /** The scope's limits, where each comes from and how much is in use (an admin key of the scope, or an operator key). */
  limits(): Promise<ScopeLimitsView> {
    return this.call('GET', '/limits');
  }

  /** Replaces the scope's overrides with `set` (an operator key only); answers the limits after the change. */
  setLimits(set: LimitOverrides): Promise<ScopeLimitsView> {
    return this.call('PUT', '/limits', set);
  }
}

/** A line for the person reading the page. */
export function describeError(err: unknown): string {
  if (err instanceof BatonApiError) return `${err.message} (${err.code})`;
  if (err instanceof Error) return err.message;
  return String(err);
}
