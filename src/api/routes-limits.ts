import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { limitsBody, scopeParams } from './schemas.ts';

/**
 * A scope's limits (src/lib/tenancy/limits.ts). Only an operator key sets them, so a tenant
 * can never raise its own; the scope's admin may read them, to see what it may use and how
 * much of it is in use; a client key of the scope, and any key of another scope, neither.
 */
export const limitsRoutes: RouteSpec[] = [
  route({
    method: 'get', path: `${SCOPE}/limits`,
    summary: "The scope's limits in force, the operator's overrides, the configured defaults and what is in use (an operator key or the scope's admin).",
    access: 'admin-or-operator', params: scopeParams,
    ok: { 200: { description: 'the limits', schema: res.limitsResponse } },
    async handler({ params: { scope } }, d) {
      return { headers: { 'cache-control': 'no-store' }, body: await d.limits.view(scope) };
    },
  }),
  route({
    method: 'put', path: `${SCOPE}/limits`,
    summary: "Replace the scope's overrides (an operator key only): a field absent reverts to its default, null is none; applies without a restart.",
    access: 'operator', params: scopeParams, body: limitsBody,
    ok: { 200: { description: 'the limits after the change', schema: res.limitsResponse } },
    async handler({ params: { scope }, body }, d) {
      return { headers: { 'cache-control': 'no-store' }, body: await d.limits.replace(scope, body) };
    },
  }),
];
