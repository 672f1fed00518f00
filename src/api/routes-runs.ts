import { BatonError } from '../lib/errors.ts';
import { presentRun, presentStreamToken } from './presenters.ts';
import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import {
  emptyBody, eventsQuery, forkBody, lastEventIdHeader, listRunsQuery, messagesQuery, rerunBody, resolveBody, runParams, scopeParams,
  sessionParams, stepParams, stepsQuery, submitBody,
} from './schemas.ts';
import { planRerun, rerunSubmit } from '../lib/engine/operations/reruns.ts';
import type { Response } from 'express';
import type { AppDeps } from './deps.ts';
import { serveEvents, type SseOptions } from './sse.ts';

const basePath = (scope: string) => `/v1/scopes/${scope}`;

/**
 * Admits an event stream for `who` (429 TOO_MANY_STREAMS past its caps; `scopeCap`: the scope's
 * maxStreams limit) and the options that serve it: counted until its connection closes,
 * whatever it answered, and ended when its key is revoked.
 */
export function admitStream(
  d: AppDeps, out: Response, gone: AbortSignal, scope: string, who: { credential: string; keyId: string }, scopeCap: number,
): SseOptions {
  const c = d.config;
  const lease = d.openStreams.admit(scope, who, scopeCap);
  out.once('close', lease.release);
  // The client went away while the cap was read: its 'close' has passed already.
  if (gone.aborted) lease.release();
  return {
    keepAliveMs: c.SSE_KEEPALIVE_MS, retryMs: c.SSE_RETRY_MS, maxBufferBytes: c.SSE_MAX_BUFFER_BYTES,
    stallMs: c.SSE_STALL_MS, signal: lease.signal, handOver: lease.handOver,
    onOpen: () => d.metrics.sseOpened(scope), onClose: () => d.metrics.sseClosed(scope),
  };
}

/** Runs, their events and their sessions' history, under /v1/scopes/:scope. */
export const runRoutes: RouteSpec[] = [
  route({
    method: 'post', path: `${SCOPE}/runs`,
    summary: 'Submit a run (a turn of a session). With `Accept: text/event-stream` the answer is the run\'s event stream ' +
      '(as GET …/runs/{runId}/events from the start; the run in the Location and Baton-Run-Id headers, warnings in Baton-Warnings): ' +
      'one request from the submit to the first token.',
    access: 'client',
    params: scopeParams, body: submitBody,
    ok: {
      202: { description: 'accepted: persisted, will reach a terminal status', schema: res.runResponse },
      200: {
        description: 'idempotent replay: the run made earlier with this idempotencyKey, or (multitask steer) a resend of a messageId, ' +
          'answered with its outcome; a new steering message that went to the active run answers 202 with `steering.outcome` pending',
        schema: res.runResponse,
      },
    },
    errors: [
      'CALLER_MEMORY_INVALID', 'OUTPUT_SCHEMA_INVALID', 'ARTIFACT_NOT_FOUND', 'SESSION_BUSY', 'DRAINING', 'IDEMPOTENCY_MISMATCH',
      'RATE_LIMITED', 'TOO_MANY_STREAMS', 'SCHEMA_CHECKS_BUSY', 'INLINE_ARTIFACTS_TOO_LARGE', 'TOO_MANY_SCHEDULED_RUNS', 'UNKNOWN_AGENT',
    ],
    async handler({ params: { scope }, body: { streamToken, ...body }, rawBody, key, http, signal }, d) {
      if ('memory' in (rawBody as object) && (body.memory === null || body.memory === undefined)) {
        throw new BatonError('CALLER_MEMORY_INVALID', undefined, [{ path: 'body.memory', message: 'must not be null' }]);
      }
      const streaming = http.req.accepts(['application/json', 'text/event-stream']) === 'text/event-stream';
      if (streaming && streamToken) {
        throw new BatonError('VALIDATION_FAILED', undefined, [{ path: 'body.streamToken', message: 'a submit that streams its events needs no stream token' }]);
      }
      // The scope's stream cap, read (or taken from this process's cache) before the submit, which admits the stream at once.
      const scopeCap = streaming ? await d.limits.maxStreams(scope) : 0;
      const { run, created, warnings, steering, streamToken: minted, admitted: sse } = await d.submissions.submit({ scope, ...body }, {
        signal,
        // A stream over its caps is refused before the run is made.
        admit: streaming ? () => admitStream(d, http.res, signal, scope, { credential: key!.id, keyId: key!.id }, scopeCap) : undefined,
        streamTokenFor: streamToken ? key!.id : undefined,
        traceHeaders: http.req.headers,
      });
      if (sse) {
        const headers: Record<string, string> = { Location: `${basePath(scope)}/runs/${run.id}`, 'Baton-Run-Id': run.id };
        if (warnings.length) headers['Baton-Warnings'] = JSON.stringify(warnings);
        await serveEvents(http.req, http.res, d.streams, { scope, runId: run.id, afterId: '0', fresh: created }, { ...sse, status: created ? 202 : 200, headers });
        return undefined;
      }
      const token = minted ? presentStreamToken(minted, { runId: run.id }) : undefined;
      const extra = {
        ...(warnings.length ? { warnings } : {}), ...(token ? { streamToken: token } : {}), ...(steering ? { steering } : {}),
      };
      return { status: created ? 202 : 200, body: { ...presentRun(run, basePath(scope)), ...extra } };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/runs`, summary: "List the scope's runs, newest first.", access: 'client',
    params: scopeParams, query: listRunsQuery, readCost: true,
    ok: { 200: { description: 'a page of runs', schema: res.runListResponse } },
    async handler({ params: { scope }, query }, d) {
      const page = await d.store.list(scope, query);
      return { body: { runs: page.runs.map((run) => presentRun(run, basePath(scope), d.waitTokens)), nextCursor: page.nextCursor } };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/runs/:runId`, summary: 'Get a run.', access: 'client',
    params: runParams, ok: { 200: { description: 'the run', schema: res.runResponse } }, errors: ['RUN_NOT_FOUND'],
    async handler({ params: { scope, runId } }, d) {
      const run = await d.store.get(scope, runId);
      if (!run) throw new BatonError('RUN_NOT_FOUND');
      return { body: presentRun(run, basePath(scope), d.waitTokens) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/runs/:runId/cancel`, summary: 'Cancel a run (a running one stops at once).', access: 'client',
    params: runParams, body: emptyBody,
    ok: { 200: { description: 'the run after the cancel', schema: res.runResponse } }, errors: ['RUN_NOT_FOUND'],
    async handler({ params: { scope, runId } }, d) {
      return { body: presentRun(await d.store.cancel(scope, runId), basePath(scope)) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/runs/:runId/steps/:stepKey/resolve`, summary: 'Resolve the step a blocked run waits on.',
    access: 'admin', params: stepParams, body: resolveBody,
    ok: { 200: { description: 'the run, queued again', schema: res.runResponse } }, errors: ['RUN_NOT_FOUND', 'STEP_NOT_BLOCKED'],
    async handler({ params: { scope, runId, stepKey }, body }, d) {
      const run = await d.store.resolveStep(scope, runId, stepKey, 'rerun' in body ? { rerun: true } : { value: body.value });
      return { body: presentRun(run, basePath(scope), d.waitTokens) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/runs/:runId/rerun`,
    summary: 'Re-run an ended run: a new run in its session with its agent, input and options (or the overrides given). ' +
      'The steps that started before `fromStep` keep their results and are not run again; from it on everything runs. ' +
      'Running a non-idempotent step again needs `allowNonIdempotent: true` and an admin key (RERUN_NON_IDEMPOTENT names each).',
    access: 'client',
    params: runParams, body: rerunBody,
    ok: {
      202: { description: 'the re-run, accepted (its `rerunOf` names the run)', schema: res.runResponse },
      200: { description: 'idempotent replay: the re-run made earlier with this idempotencyKey', schema: res.runResponse },
    },
    errors: [
      'FORBIDDEN', 'RUN_NOT_FOUND', 'RUN_NOT_FINISHED', 'STEP_NOT_FOUND', 'RERUN_NON_IDEMPOTENT', 'CALLER_MEMORY_INVALID', 'ARTIFACT_NOT_FOUND',
      'DRAINING', 'IDEMPOTENCY_MISMATCH', 'RATE_LIMITED', 'SESSION_HISTORY_FULL', 'SCHEMA_CHECKS_BUSY', 'UNKNOWN_AGENT',
    ],
    async handler({ params: { scope, runId }, body, rawBody, key, http, signal }, d) {
      if ('memory' in (rawBody as object) && (body.memory === null || body.memory === undefined)) {
        throw new BatonError('CALLER_MEMORY_INVALID', undefined, [{ path: 'body.memory', message: 'must not be null' }]);
      }
      // Running a non-idempotent step again is an operator's call, as resolving a blocked step by re-running it is.
      if (body.allowNonIdempotent && key?.role !== 'admin') {
        throw new BatonError('FORBIDDEN', undefined, [{ path: 'body.allowNonIdempotent', message: 'takes an admin key of the scope' }]);
      }
      const run = await d.store.get(scope, runId);
      if (!run) throw new BatonError('RUN_NOT_FOUND');
      const plan = planRerun(run, await d.store.stepOrder(scope, runId), body);
      const { run: rerun, created, warnings } = await d.submissions.submit(rerunSubmit(scope, run, body), {
        signal, rerun: plan, traceHeaders: http.req.headers,
      });
      return { status: created ? 202 : 200, body: { ...presentRun(rerun, basePath(scope)), ...(warnings.length ? { warnings } : {}) } };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/sessions/:sessionId/fork`,
    summary: "Fork a session: a new session whose history is a copy of this one's committed turns up to `atTurn` " +
      '(or through the turn of `atRunId`); later commits on either side never show on the other.',
    access: 'client',
    params: sessionParams, body: forkBody,
    ok: { 201: { description: 'the new session', schema: res.sessionForkResponse } },
    errors: ['TURN_NOT_FOUND', 'SESSION_EXISTS'],
    async handler({ params: { scope, sessionId }, body }, d) {
      return { status: 201, body: await d.forks.fork(scope, sessionId, body) };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/runs/:runId/events`, summary: "Stream a run's events (SSE), resumable by id; a key or a stream token.",
    access: 'stream',
    params: runParams, query: eventsQuery, headers: { 'Last-Event-ID': lastEventIdHeader },
    ok: {
      200: { description: 'replay after the given id, then live, until `end`', schema: res.sseStream, contentType: 'text/event-stream' },
      204: { description: 'the reader already has the `end` event' },
    },
    errors: ['RUN_NOT_FOUND', 'TOO_MANY_STREAMS'],
    async handler({ params: { scope, runId }, query, headers, key, http, signal }, d) {
      const afterId = headers['last-event-id'] ?? query.after ?? '0';
      // Counted against the caps of its key (a token's: the key that minted it), of the stream
      // token if one opened it, and of the scope until the connection closes, whatever it
      // answered; ended with its key's streams.
      const who = key ? { credential: key.id, keyId: key.id } : (http.res.locals.streamCredential as { credential: string; keyId: string });
      const scopeCap = await d.limits.maxStreams(scope);
      await serveEvents(http.req, http.res, d.streams, { scope, runId, afterId }, admitStream(d, http.res, signal, scope, who, scopeCap));
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/sessions/:sessionId/messages`, summary: "A session's committed history, oldest first.",
    access: 'client', params: sessionParams, query: messagesQuery, readCost: true,
    ok: { 200: { description: 'a page of messages', schema: res.messagesResponse } },
    async handler({ params: { scope, sessionId }, query }, d) {
      return { body: await d.store.messages(scope, sessionId, query) };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/runs/:runId/steps`,
    summary: "A run's memoized steps, with their values and times: a page of at most `limit` steps and PAGE_MAX_BYTES of values.",
    access: 'client', readCost: true,
    params: runParams, query: stepsQuery,
    ok: { 200: { description: 'the steps, in the order they started', schema: res.stepsResponse } }, errors: ['RUN_NOT_FOUND'],
    async handler({ params: { scope, runId }, query }, d) {
      const page = await d.store.steps(scope, runId, query);
      const steps = page.steps.map((s) => ({ ...s, startedAt: iso(s.startedAt), finishedAt: iso(s.finishedAt) }));
      return { body: { steps, nextCursor: page.nextCursor } };
    },
  }),
];

function iso(ms: number | undefined): string | undefined {
  return ms === undefined ? undefined : new Date(ms).toISOString();
}
