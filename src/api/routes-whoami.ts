import * as res from './response-schemas.ts';
import { route, type RouteSpec } from './route.ts';

/**
 * GET /v1/whoami: the scope and role of the presented key. A client that holds only a key
 * (the run inspector's login, a printed link) learns which scope to address; the answer
 * is about that key alone, never about another key or scope.
 */
export const whoamiRoutes: RouteSpec[] = [
  route({
    method: 'get', path: '/v1/whoami', summary: "The presented key's scope and role (any scope's key).", access: 'key',
    ok: { 200: { description: 'the key', schema: res.whoamiResponse } },
    handler: ({ key }) => ({ headers: { 'cache-control': 'no-store' }, body: { scope: key!.scope, role: key!.role, keyId: key!.id } }),
  }),
];
