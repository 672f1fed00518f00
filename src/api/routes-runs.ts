import { Router, type Request } from 'express';
import { BatonError } from '../lib/errors.ts';
import type { AppDeps } from './deps.ts';
import { requireRole } from './auth.ts';
import { presentRun } from './presenters.ts';
import { serveEvents } from './sse.ts';
import { parse } from './validate.ts';
import {
  emptyBody, eventsQuery, lastEventIdHeader, listRunsQuery, messagesQuery, resolveBody, runParams,
  scopeParams, sessionParams, stepParams, submitBody,
} from './schemas.ts';

const basePath = (scope: string) => `/v1/scopes/${scope}`;

/** Runs, their events and their sessions' history, under /v1/scopes/:scope. */
export function runsRouter(d: AppDeps): Router {
  const r = Router({ mergeParams: true });

  r.post('/runs', async (req, res) => {
    const { scope } = parse(scopeParams, req.params, 'params');
    const body = parse(submitBody, req.body, 'body');
    if ('memory' in (req.body as object) && (body.memory === null || body.memory === undefined)) {
      throw new BatonError('CALLER_MEMORY_INVALID', undefined, [{ path: 'body.memory', message: 'must not be null' }]);
    }
    const { run, created } = await d.store.submit({ scope, ...body });
    res.status(created ? 202 : 200).json(presentRun(run, basePath(scope)));
  });

  r.get('/runs', async (req, res) => {
    const { scope } = parse(scopeParams, req.params, 'params');
    const q = parse(listRunsQuery, req.query, 'query');
    const page = await d.store.list(scope, q);
    res.json({ runs: page.runs.map((run) => presentRun(run, basePath(scope))), nextCursor: page.nextCursor });
  });

  r.get('/runs/:runId', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    const run = await d.store.get(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    res.json(presentRun(run, basePath(scope)));
  });

  r.post('/runs/:runId/cancel', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    parse(emptyBody, req.body, 'body');
    const run = await d.store.cancel(scope, runId);
    res.json(presentRun(run, basePath(scope)));
  });

  r.post('/runs/:runId/steps/:stepKey/resolve', requireRole('admin'), async (req, res) => {
    const { scope, runId, stepKey } = parse(stepParams, req.params, 'params');
    const body = parse(resolveBody, req.body, 'body');
    const run = await d.store.resolveStep(scope, runId, stepKey, 'rerun' in body ? { rerun: true } : { value: body.value });
    res.json(presentRun(run, basePath(scope)));
  });

  r.get('/runs/:runId/events', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    const q = parse(eventsQuery, req.query, 'query');
    const afterId = lastEventId(req) ?? q.after ?? '0';
    if (!(await d.redis.exists(d.keys.scope(scope).events(runId)))) throw new BatonError('RUN_NOT_FOUND');
    await serveEvents(req, res, {
      redis: d.redis, keys: d.keys, hub: d.hub, scope, runId, afterId,
      keepAliveMs: d.config.SSE_KEEPALIVE_MS, maxBufferBytes: d.config.SSE_MAX_BUFFER_BYTES,
    });
  });

  r.get('/sessions/:sessionId/messages', async (req, res) => {
    const { scope, sessionId } = parse(sessionParams, req.params, 'params');
    const q = parse(messagesQuery, req.query, 'query');
    res.json(await d.store.messages(scope, sessionId, q));
  });

  return r;
}

function lastEventId(req: Request): string | undefined {
  const h = req.headers['last-event-id'];
  if (h === undefined) return undefined;
  return parse(lastEventIdHeader, h, 'headers');
}
