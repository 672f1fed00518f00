import {
  ID_PATTERN, type MessagesPage, type Run, type RunStreamEvent, type ScopeLimits,
  type ScopeLimitsView, type StreamToken, type SubmitRequest, type Wait,
  type WaitResumed, type CreateScheduleRequest, type ScheduleList, type ScheduleListOptions, type ScheduleView,
} from '../contract/index.ts';
import type { Answer, Send } from './transport.ts';
import { BatonStreamError, apiError } from './errors.ts';
import { defaultSend, jsonRequest, ok, pageQuery } from './requests.ts';
import {
  Connection, answerTokens, readEvents, sleep, type AnswerTokensOptions, type ReadState, type SubmittedStream,
} from './event-stream.ts';
import type {
  ForkRequest, OperationList, OperationListOptions, OperationView, RerunRequest, RunFilter, SessionFork,
} from '../contract/index.ts';

export type { ForkRequest, OperationList, OperationListOptions, OperationView, RerunRequest, RunFilter, SessionFork };

/**
 * Typed HTTP client for Baton's API, on Node's http module in Node and on fetch elsewhere
 * (transport.ts). One client talks to one scope with one API key:
 *
 *   const baton = new BatonClient({ url: 'http://127.0.0.1:3000', apiKey, scope: 'dev' });
 *   const run = await baton.submit({ sessionId: 's1', input: { content: 'hi' } });
 *   for await (const text of baton.tokens(run.id)) process.stdout.write(text);
 */

export type {
  ApprovalDecision, AttemptEventData, EventRole, MessagesPage, PublicRunStatus, Run, RunError, RunInput, RunResult, RunStreamEvent,
  ScopeLimits, ScopeLimitsView, ScopeUsage,
  SessionMessage, StatusEventData, StreamToken, SubmitRequest, TerminalStatus, TextEventData, ToolCallEventData, ToolResultEventData,
  UsageRow, UsageTotals, Wait, WaitEventEntry, WaitKind, WaitResumed,
  CreateScheduleRequest, MissedTickPolicy, ScheduleList, ScheduleListOptions, ScheduleRunTemplate, ScheduleStatus, ScheduleView,
} from '../contract/index.ts';

export interface StreamOptions {
  /** Start after this event id (what a previous reader last saw). Default: from the start. */
  after?: string;
  signal?: AbortSignal;
}

export interface BatonClientOptions {
  /** Base URL of the API, e.g. `http://127.0.0.1:3000`. */
  url: string;
  apiKey: string;
  scope: string;
  /**
   * Sends every request with this fetch. Default: Node's http module in Node (20.16 and later),
   * the global fetch elsewhere; pass `globalThis.fetch` to use fetch in Node too.
   */
  fetch?: typeof fetch;
  /**
   * stream(): how many reconnects in a row may fail (no event received) before it gives up.
   * 10 with backoff from the server's `retry:` hint (1 s) up to 15 s: about two minutes,
   * enough for an API restart or a load balancer moving the client elsewhere.
   */
  maxReconnects?: number;
  /**
   * stream(): a connection silent for this long is treated as dead and resumed. The API
   * sends a keep-alive comment every SSE_KEEPALIVE_MS (15 s); 45 s is three missed ones, so a
   * half-open connection (a peer that vanished without a FIN) cannot hang a reader forever.
   */
  idleTimeoutMs?: number;
}

// The error classes and the answer's text, defined beside what raises them.
export { BatonApiError, BatonStreamError } from './errors.ts';
export { answerTokens, type AnswerTokensOptions, type SubmittedStream } from './event-stream.ts';

const MAX_BACKOFF_MS = 15_000;

export class BatonClient {
  private readonly base: string;
  private readonly headers: Record<string, string>;
  private readonly send: Send;
  private readonly maxReconnects: number;
  private readonly idleTimeoutMs: number;

  constructor(o: BatonClientOptions) {
    if (!ID_PATTERN.test(o.scope)) throw new TypeError(`invalid scope ${JSON.stringify(o.scope)}`);
    this.base = `${o.url.replace(/\/+$/, '')}/v1/scopes/${o.scope}`;
    this.headers = { authorization: `Bearer ${o.apiKey}` };
    this.send = defaultSend(o.fetch);
    this.maxReconnects = o.maxReconnects ?? 10;
    this.idleTimeoutMs = o.idleTimeoutMs ?? 45_000;
  }

  /** Submits a run. An idempotencyKey seen before returns the existing run. */
  submit(req: SubmitRequest): Promise<Run> {
    return this.json('POST', '/runs', req);
  }

  get(runId: string): Promise<Run> {
    return this.json('GET', `/runs/${encodeURIComponent(runId)}`);
  }

  /** Cancels a run: at once when it is not running, else its worker stops it (status follows). */
  cancel(runId: string): Promise<Run> {
    return this.json('POST', `/runs/${encodeURIComponent(runId)}/cancel`, {});
  }

  /**
   * Re-runs an ended run: a new run of its session, agent, input and options (or `req`'s
   * overrides); the steps before `req.fromStep` keep their results. Running a non-idempotent
   * step again needs `allowNonIdempotent: true` (else 409 RERUN_NON_IDEMPOTENT names each).
   */
  rerun(runId: string, req: RerunRequest = {}): Promise<Run> {
    return this.json('POST', `/runs/${encodeURIComponent(runId)}/rerun`, req);
  }

  /** Forks a session at a turn (`atTurn`, or `atRunId`): a new session holding a copy of its history up to there. */
  fork(sessionId: string, req: ForkRequest): Promise<SessionFork> {
    return this.json('POST', `/sessions/${encodeURIComponent(sessionId)}/fork`, req);
  }

  /** The run's pending waits (each with its resume token); [] when it waits for nothing. */
  async waits(runId: string): Promise<Wait[]> {
    return (await this.get(runId)).waits ?? [];
  }

  /**
   * Resumes a pending wait with `value` (checked against the wait's schema: 400 otherwise).
   * Once per wait: a wait resumed, timed out or never declared is 409 WAIT_NOT_PENDING.
   * Returns the run afterwards.
   */
  resume(runId: string, waitKey: string, value: unknown): Promise<Run> {
    return this.json('POST', `/runs/${encodeURIComponent(runId)}/waits/${encodeURIComponent(waitKey)}`, { value });
  }

  /** Approves an approval wait: the tool call it holds runs. */
  approve(runId: string, waitKey: string): Promise<Run> {
    return this.resume(runId, waitKey, { approved: true });
  }

  /** Declines an approval wait: the tool does not run, and the agent is told (with `reason`). */
  decline(runId: string, waitKey: string, reason?: string): Promise<Run> {
    return this.resume(runId, waitKey, reason === undefined ? { approved: false } : { approved: false, reason });
  }

  /**
   * A read-only token for a browser page, so the page never holds the API key: it opens
   * `…/runs/{runId}/events?access_token=<token>` for the run, or for every run of the session,
   * until `expiresAt`, and nothing else.
   */
  streamToken(grant: { runId: string } | { sessionId: string }): Promise<StreamToken> {
    const path = 'runId' in grant ? `/runs/${encodeURIComponent(grant.runId)}` : `/sessions/${encodeURIComponent(grant.sessionId)}`;
    return this.json('POST', `${path}/stream-token`, {});
  }

  /** A session's committed history, oldest first. */
  messages(sessionId: string, opts: { limit?: number; cursor?: string } = {}): Promise<MessagesPage> {
    const q = new URLSearchParams();
    if (opts.limit !== undefined) q.set('limit', String(opts.limit));
    if (opts.cursor !== undefined) q.set('cursor', opts.cursor);
    const qs = q.size ? `?${q}` : '';
    return this.json('GET', `/sessions/${encodeURIComponent(sessionId)}/messages${qs}`);
  }

  /**
   * The scope's limits: those in force, the operator's overrides, the defaults and what is in
   * use. For an operator key, or an admin key of the scope (403 for a client key).
   */
  limits(): Promise<ScopeLimitsView> {
    return this.json('GET', '/limits');
  }

  /**
   * Replaces the scope's overrides with `set` (an operator key only): a limit it leaves out
   * reverts to its default; null for maxActivePerKey or tokensPerDay is none. Applies without
   * a restart. A value out of range is 400 VALIDATION_FAILED naming it, and changes nothing.
   */
  setLimits(set: Partial<ScopeLimits>): Promise<ScopeLimitsView> {
    return this.json('PUT', '/limits', set);
  }

  /**
   * Makes a cron schedule (an admin key): each tick submits one run from `req.run`
   * (docs/schedules.md). The answer has its next five fire times.
   */
  createSchedule(req: CreateScheduleRequest): Promise<ScheduleView> {
    return this.json('POST', '/schedules', req);
  }

  /**
   * A page of the scope's schedules, oldest first: at most `limit` (default 50) and
   * PAGE_MAX_BYTES of them. Pass a page's `nextCursor` as `cursor` for the next; null: no more.
   */
  listSchedules(opts: ScheduleListOptions = {}): Promise<ScheduleList> {
    return this.json('GET', `/schedules${pageQuery(opts)}`);
  }

  /** A schedule, with its next five fire times and its latest tick's run or refusal. */
  getSchedule(scheduleId: string): Promise<ScheduleView> {
    return this.json('GET', `/schedules/${encodeURIComponent(scheduleId)}`);
  }

  /** Pauses a schedule (an admin key): no tick fires until it is resumed. */
  pauseSchedule(scheduleId: string): Promise<ScheduleView> {
    return this.json('POST', `/schedules/${encodeURIComponent(scheduleId)}/pause`, {});
  }

  /** Resumes a schedule (an admin key) from its first tick after now. */
  resumeSchedule(scheduleId: string): Promise<ScheduleView> {
    return this.json('POST', `/schedules/${encodeURIComponent(scheduleId)}/resume`, {});
  }

  /** Deletes a schedule (an admin key); the runs it made stay. */
  async deleteSchedule(scheduleId: string): Promise<void> {
    const res = await this.send(`${this.base}/schedules/${encodeURIComponent(scheduleId)}`, { method: 'DELETE', headers: this.headers });
    if (!ok(res)) throw await apiError(res);
  }

  /**
   * Cancels every run the filter matches, in the background (an admin key): the answer is the
   * operation, whose `matched`, `done` and `failed` getOperation() reads as it goes.
   */
  bulkCancel(filter: RunFilter): Promise<OperationView> {
    return this.json('POST', '/runs/cancel', { filter });
  }

  /** Re-runs every ended run the filter matches, each once, in the background (an admin key). */
  bulkRerun(filter: RunFilter, opts: { allowNonIdempotent?: boolean } = {}): Promise<OperationView> {
    return this.json('POST', '/runs/rerun', { filter, ...opts });
  }

  /** A bulk operation and its progress. */
  getOperation(operationId: string): Promise<OperationView> {
    return this.json('GET', `/operations/${encodeURIComponent(operationId)}`);
  }

  /**
   * A page of the scope's bulk operations, newest first: at most `limit` (default 50) and
   * PAGE_MAX_BYTES of them. Pass a page's `nextCursor` as `cursor` for the next; null: no more.
   */
  listOperations(opts: OperationListOptions = {}): Promise<OperationList> {
    return this.json('GET', `/operations${pageQuery(opts)}`);
  }

  /** Stops a bulk operation (an admin key): no batch starts after this. */
  cancelOperation(operationId: string): Promise<OperationView> {
    return this.json('POST', `/operations/${encodeURIComponent(operationId)}/cancel`, {});
  }

  /**
   * The run's events, in order, each once, ending with `end`. A dropped connection is
   * resumed with the last id received (Last-Event-ID), so nothing is lost or repeated.
   * Throws BatonApiError for 4xx answers (404: unknown run or expired log) and
   * BatonStreamError when the API stays unreachable.
   */
  async *stream(runId: string, opts: StreamOptions = {}): AsyncGenerator<RunStreamEvent, void, undefined> {
    const url = `${this.base}/runs/${encodeURIComponent(runId)}/events`;
    let after = opts.after;
    let failures = 0;
    let retryMs = 1_000;
    for (;;) {
      opts.signal?.throwIfAborted();
      if (failures > 0) {
        if (failures > this.maxReconnects) throw new BatonStreamError(`stream of run ${runId}: ${failures - 1} reconnects failed`);
        const backoff = Math.min(MAX_BACKOFF_MS, retryMs * 2 ** (failures - 1));
        await sleep(backoff / 2 + Math.random() * (backoff / 2), opts.signal);
      }
      const headers: Record<string, string> = { ...this.headers, accept: 'text/event-stream' };
      if (after) headers['last-event-id'] = after;
      const conn = new Connection(this.idleTimeoutMs, opts.signal);
      let res: Answer;
      try {
        res = await this.send(url, { method: 'GET', headers, signal: conn.signal });
      } catch (err) {
        conn.close();
        if (opts.signal?.aborted) throw err;
        failures++;
        continue;
      }
      if (res.status !== 200) {
        conn.close();
        // 204: the reader already has the `end` event (it resumed after it).
        if (res.status === 204) {
          await res.cancel();
          return;
        }
        const err = await apiError(res);
        if (res.status >= 500 || res.status === 429) {
          failures++;
          continue;
        }
        throw err;
      }
      const read: ReadState = { after, progressed: false, ended: false };
      yield* readEvents(res, conn, read, opts.signal);
      if (read.ended) return;
      after = read.after;
      retryMs = read.retryMs ?? retryMs;
      failures = read.progressed ? 0 : failures + 1;
    }
  }

  /**
   * Submits a run and streams its events in the same request: the API answers with the run's
   * event stream from its start (the run's id in a header), so the first token arrives a
   * request sooner than with submit() then stream(). `events` goes on as stream() does: a
   * dropped connection is resumed from the last event received. As with submit(), a request
   * that fails in flight may have made the run: an idempotencyKey makes a retry safe.
   * `answerTokens(events)` reads them as text, as tokens() does.
   */
  async submitAndStream(req: SubmitRequest, opts: StreamOptions = {}): Promise<SubmittedStream> {
    const conn = new Connection(this.idleTimeoutMs, opts.signal);
    let res: Answer;
    try {
      res = await this.send(`${this.base}/runs`, {
        method: 'POST', body: JSON.stringify(req), signal: conn.signal,
        headers: { ...this.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
      });
    } catch (err) {
      conn.close();
      throw err;
    }
    const runId = res.header('baton-run-id');
    if (!ok(res) || runId === null) {
      conn.close();
      throw await apiError(res);
    }
    const warnings = res.header('baton-warnings');
    return {
      runId, created: res.status === 202, warnings: warnings ? (JSON.parse(warnings) as string[]) : [],
      events: this.followSubmitted(runId, res, conn, opts),
    };
  }

  /** The events of a submit's own stream, then, should it break before `end`, stream()'s. */
  private async *followSubmitted(
    runId: string, body: Answer, conn: Connection, opts: StreamOptions,
  ): AsyncGenerator<RunStreamEvent, void, undefined> {
    const read: ReadState = { after: undefined, progressed: false, ended: false };
    yield* readEvents(body, conn, read, opts.signal);
    if (!read.ended) yield* this.stream(runId, { ...opts, after: read.after });
  }

  /**
   * The text of the run's answer as it arrives, by the rule of answerTokens(): each token's
   * text; and, for a run whose last attempt streamed no token (an agent that returns its
   * answer without emitting it), the result's answer in one piece when the run ends. Never
   * an empty string. An attempt starts the answer over (`onAttempt` is called at each).
   */
  tokens(runId: string, opts: StreamOptions & AnswerTokensOptions = {}): AsyncGenerator<string, void, undefined> {
    return answerTokens(this.stream(runId, opts), { onAttempt: opts.onAttempt, fromStart: opts.after === undefined });
  }

  private json<T>(method: string, path: string, body?: unknown): Promise<T> {
    return jsonRequest<T>(this.send, this.base + path, method, this.headers, body);
  }
}

/**
 * Resumes the wait a resume token opens, with no API key (a link in an email, a chat-ops
 * button): `token` is a wait's `token` as a key of its scope sees it. Once: a second use is
 * 409 WAIT_NOT_PENDING; a token that opens nothing is 404.
 */
export async function resumeWithToken(o: { url: string; token: string; value: unknown; fetch?: typeof fetch }): Promise<WaitResumed> {
  const url = `${o.url.replace(/\/+$/, '')}/v1/waits/${encodeURIComponent(o.token)}`;
  return jsonRequest<WaitResumed>(defaultSend(o.fetch), url, 'POST', {}, { value: o.value });
}
