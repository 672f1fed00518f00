import { Router } from 'express';
import { BatonError } from '../lib/errors.ts';
import { readSteps } from '../lib/engine/step-list.ts';
import type { AppDeps } from './deps.ts';
import { parse } from './validate.ts';
import { emptyBody, emptyQuery, runParams } from './schemas.ts';

/** A run's memoized steps, under /v1/scopes/:scope (the run inspector shows them). */
export function stepsRouter(d: Pick<AppDeps, 'redis' | 'keys'>): Router {
  const r = Router({ mergeParams: true });

  r.get('/runs/:runId/steps', async (req, res) => {
    const { scope, runId } = parse(runParams, req.params, 'params');
    parse(emptyQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    const steps = await readSteps(d.redis, d.keys, scope, runId);
    if (!steps) throw new BatonError('RUN_NOT_FOUND');
    res.json({
      steps: steps.map((s) => ({ ...s, startedAt: iso(s.startedAt), finishedAt: iso(s.finishedAt) })),
    });
  });

  return r;
}

function iso(ms: number | undefined): string | undefined {
  return ms === undefined ? undefined : new Date(ms).toISOString();
}
