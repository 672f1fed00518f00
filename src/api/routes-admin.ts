import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { drainBody, emptyBody, runtimeParams, scopeParams } from './schemas.ts';

/**
 * Runtimes as one scope sees them, and the operator actions on a (scope, runtime) pair. The
 * scope comes from the path, which authenticate() already matched against the key, so a
 * scope's admin can only ever count or drain its own runs.
 */
export const adminRoutes: RouteSpec[] = [
  route({
    method: 'get', path: `${SCOPE}/runtimes`, summary: 'Runtimes, their live workers and agents.', access: 'client',
    params: scopeParams, ok: { 200: { description: 'runtimes', schema: res.runtimesResponse } },
    async handler({ params: { scope } }, d) {
      const runtimes = await d.admin.runtimes(scope);
      return { body: { runtimes: runtimes.map((rt) => ({ ...rt, lastSeenAt: new Date(rt.lastSeenAt).toISOString() })) } };
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/runtimes/:runtimeId/stats`, summary: "Counts of this scope's runs on one runtime.",
    access: 'admin', params: runtimeParams, ok: { 200: { description: 'stats', schema: res.statsResponse } },
    async handler({ params: { scope, runtimeId } }, d) {
      return { body: await d.admin.stats(scope, runtimeId) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/runtimes/:runtimeId/drain`, summary: "Stop starting this scope's runs on the runtime.",
    access: 'admin', params: runtimeParams, body: drainBody,
    ok: { 200: { description: 'draining', schema: res.drainResponse } },
    async handler({ params: { scope, runtimeId }, body }, d) {
      return { body: await d.admin.drain(scope, runtimeId, body) };
    },
  }),
  route({
    method: 'delete', path: `${SCOPE}/runtimes/:runtimeId/drain`, summary: 'Resume: parked runs are admitted again.',
    access: 'admin', params: runtimeParams, body: emptyBody,
    ok: { 200: { description: 'resumed', schema: res.resumeResponse } },
    async handler({ params: { scope, runtimeId } }, d) {
      return { body: await d.admin.resume(scope, runtimeId) };
    },
  }),
];
