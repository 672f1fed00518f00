import { Router } from 'express';
import type { ApiKeyInfo } from '../lib/tenancy/api-keys.ts';
import type { AppDeps } from './deps.ts';
import { identify } from './auth.ts';
import { parse } from './validate.ts';
import { emptyBody, emptyQuery } from './schemas.ts';

/**
 * GET /v1/whoami: the scope and role of the presented key. A client that holds only a key
 * (the run inspector's login, a printed link) learns which scope to address; the answer
 * is about that key alone, never about another key or scope.
 */
export function whoamiRouter(d: Pick<AppDeps, 'apiKeys'>): Router {
  const r = Router();
  r.get('/v1/whoami', identify(d.apiKeys), (req, res) => {
    parse(emptyQuery, req.query, 'query');
    parse(emptyBody, req.body, 'body');
    const key = res.locals.apiKey as ApiKeyInfo;
    res.set('cache-control', 'no-store').json({ scope: key.scope, role: key.role, keyId: key.id });
  });
  return r;
}
