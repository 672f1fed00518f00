import { Router } from 'express';
import type { AppDeps } from './deps.ts';
import { requireRole } from './auth.ts';
import { parse } from './validate.ts';
import { drainBody, emptyBody, emptyQuery, runtimeParams, scopeParams } from './schemas.ts';

/**
 * Runtimes as one scope sees them, and the operator actions on a (scope, runtime) pair. The
 * scope comes from the path, which authenticate() already matched against the key, so a
 * scope's admin can only ever count or drain its own runs.
 */
export function adminRouter(d: AppDeps): Router {
  const r = Router({ mergeParams: true });

  r.get('/runtimes', async (req, res) => {
    const { scope } = parse(scopeParams, req.params, 'params');
    parse(emptyQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    const runtimes = await d.admin.runtimes(scope);
    res.json({ runtimes: runtimes.map((rt) => ({ ...rt, lastSeenAt: new Date(rt.lastSeenAt).toISOString() })) });
  });

  r.get('/runtimes/:runtimeId/stats', requireRole('admin'), async (req, res) => {
    const { scope, runtimeId } = parse(runtimeParams, req.params, 'params');
    parse(emptyQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    res.json(await d.admin.stats(scope, runtimeId));
  });

  r.post('/runtimes/:runtimeId/drain', requireRole('admin'), async (req, res) => {
    const { scope, runtimeId } = parse(runtimeParams, req.params, 'params');
    const body = parse(drainBody, req.body, 'body');
    parse(emptyQuery, req.query, 'query');
    res.json(await d.admin.drain(scope, runtimeId, body));
  });

  r.delete('/runtimes/:runtimeId/drain', requireRole('admin'), async (req, res) => {
    const { scope, runtimeId } = parse(runtimeParams, req.params, 'params');
    parse(emptyBody, req.body, 'body');
    parse(emptyQuery, req.query, 'query');
    res.json(await d.admin.resume(scope, runtimeId));
  });

  return r;
}
