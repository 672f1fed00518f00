import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { runParams, scopeParams, usageQuery } from './schemas.ts';

/**
 * Model usage (invariant 13: each call made counted once). The scope's, for billing and
 * quotas: admin only, like the other numbers about a whole scope. A run's, with its cost by
 * MODEL_PRICES: to any key that may read the run (the inspector shows it on the run's page).
 */
export const usageRoutes: RouteSpec[] = [
  route({
    method: 'get', path: `${SCOPE}/usage`, summary: "The scope's model token usage by day (UTC), agent and model.",
    access: 'admin', params: scopeParams, query: usageQuery, readCost: true,
    ok: { 200: { description: 'usage', schema: res.usageResponse } },
    async handler({ params: { scope }, query: { from, to, limit, cursor } }, d) {
      return { body: await d.usage.scope(scope, from, to, { limit, cursor }) };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/runs/:runId/usage`,
    summary: "A run's model token usage so far, by model, and its cost where MODEL_PRICES prices every model it called.",
    access: 'client', params: runParams,
    ok: { 200: { description: 'the run’s usage', schema: res.runUsageResponse } }, errors: ['RUN_NOT_FOUND'],
    async handler({ params: { scope, runId } }, d) {
      return { body: await d.usage.run(scope, runId) };
    },
  }),
];
