import { Router, type Request } from 'express';
import { BatonError } from '../lib/errors.ts';
import { compareIds, lastEvent } from '../lib/streams/log.ts';
import { assertValidOutputSchema } from '../lib/engine/output-schema.ts';
import { assertAttachmentsExist } from '../lib/artifacts/resolve.ts';
import { artifactStoreOf } from './routes-artifacts.ts';
import type { AppDeps } from './deps.ts';
import { requireRole } from './auth.ts';
import { presentRun } from './presenters.ts';
import { serveEvents } from './sse.ts';
import { parse } from './validate.ts';
import {
  emptyBody, emptyQuery, eventsQuery, lastEventIdHeader, listRunsQuery, messagesQuery, resolveBody, runParams,
  scopeParams, sessionParams, stepParams, submitBody,
} from './schemas.ts';

const basePath = (scope: string) => `/v1/scopes/${scope}`;

/** Runs, their events and their sessions' history, under /v1/scopes/:scope. */
export function runsRouter(d: AppDeps): Router {
  const r = Router({ mergeParams: true });
  const artifacts = artifactStoreOf(d);

  r.post('/runs', async (req, res) => {
    const { scope } = parse(scopeParams, req.params, 'params');
    const body = parse(submitBody, req.body, 'body');
    parse(emptyQuery, req.query, 'query');
    if ('memory' in (req.body as object) && (body.memory === null || body.memory === undefined)) {
      throw new BatonError('CALLER_MEMORY_INVALID', undefined, [{ path: 'body.memory', message: 'must not be null' }]);
    }
    // Every check that can refuse the input runs before the rate limit, so bad input spends no token.
    if (body.outputSchema !== undefined) assertValidOutputSchema(body.outputSchema);
    await assertAttachmentsExist(artifacts, scope, body.input.artifacts);
    const warnings = await d.registry.admissionWarnings(body.runtime, body.agent);
    await d.submitLimiter.take(scope);
    const { run, created } = await d.store.submit({ scope, ...body });
    res.status(created ? 202 : 200).json({ ...presentRun(run, basePath(scope)), ...(warnings.length ? { warnings } : {}) });
  });

  r.get('/runs', async (req, res) => {
    const { scope } = parse(scopeParams, req.params, 'params');
    const q = parse(listRunsQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    const page = await d.store.list(scope, q);
    res.json({ runs: page.runs.map((run) => presentRun(run, basePath(scope))), nextCursor: page.nextCursor });
  });

  r.get('/runs/:runId', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    parse(emptyQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    const run = await d.store.get(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    res.json(presentRun(run, basePath(scope)));
  });

  r.post('/runs/:runId/cancel', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    parse(emptyBody, req.body, 'body');
    parse(emptyQuery, req.query, 'query');
    const run = await d.store.cancel(scope, runId);
    res.json(presentRun(run, basePath(scope)));
  });

  r.post('/runs/:runId/steps/:stepKey/resolve', requireRole('admin'), async (req, res) => {
    const { scope, runId, stepKey } = parse(stepParams, req.params, 'params');
    const body = parse(resolveBody, req.body, 'body');
    parse(emptyQuery, req.query, 'query');
    const run = await d.store.resolveStep(scope, runId, stepKey, 'rerun' in body ? { rerun: true } : { value: body.value });
    res.json(presentRun(run, basePath(scope)));
  });

  r.get('/runs/:runId/events', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    const q = parse(eventsQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    const afterId = lastEventId(req) ?? q.after ?? '0';
    const newest = await lastEvent(d.redis, d.keys, scope, runId);
    if (!newest) throw new BatonError('RUN_NOT_FOUND');
    // The reader already has the `end` event: 204 tells an EventSource to stop reconnecting.
    if (newest.type === 'end' && afterId !== '0' && compareIds(newest.id, afterId) <= 0) return void res.status(204).end();
    await serveEvents(req, res, {
      redis: d.redis, keys: d.keys, hub: d.hub, scope, runId, afterId,
      keepAliveMs: d.config.SSE_KEEPALIVE_MS, retryMs: d.config.SSE_RETRY_MS, maxBufferBytes: d.config.SSE_MAX_BUFFER_BYTES,
      onOpen: () => d.metrics.sseOpened(scope), onClose: () => d.metrics.sseClosed(scope),
    });
  });

  r.get('/sessions/:sessionId/messages', async (req, res) => {
    const { scope, sessionId } = parse(sessionParams, req.params, 'params');
    const q = parse(messagesQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    res.json(await d.store.messages(scope, sessionId, q));
  });

  return r;
}

function lastEventId(req: Request): string | undefined {
  const h = req.headers['last-event-id'];
  if (h === undefined) return undefined;
  return parse(lastEventIdHeader, h, 'headers');
}
