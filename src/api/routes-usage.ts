import { scopeUsage } from '../lib/tenancy/usage.ts';
import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { scopeParams, usageQuery } from './schemas.ts';

/**
 * The scope's model usage (invariant 13: each call made counted once), for billing and
 * quotas: admin only, like the other numbers about a whole scope.
 */
export const usageRoutes: RouteSpec[] = [
  route({
    method: 'get', path: `${SCOPE}/usage`, summary: "The scope's model token usage by day (UTC), agent and model.",
    access: 'admin', params: scopeParams, query: usageQuery,
    ok: { 200: { description: 'usage', schema: res.usageResponse } },
    async handler({ params: { scope }, query: { from, to } }, d) {
      return { body: await scopeUsage(d.redis, d.keys, scope, from, to) };
    },
  }),
];
