import { createHash } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { ApiKeyInfo, ApiKeyStore } from '../lib/tenancy/api-keys.ts';
import type { StreamTokenStore } from '../lib/tenancy/stream-tokens.ts';
import { BatonError } from '../lib/errors.ts';
import { authorizationHeader } from './schemas.ts';

/**
 * Every /v1/scopes/:scope route of a tenant: a valid key (401 otherwise) of this very scope.
 * A key of another scope gets the same 404 a missing object gets, so it learns nothing about
 * what exists elsewhere. An operator key gets 403 on every such route, before anything is
 * looked up: it may change a scope's limits, never read or touch its runs and data.
 */
export function authenticate(store: ApiKeyStore): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    const info = await presentedKey(store, req);
    if (!info) return next(new BatonError('UNAUTHENTICATED'));
    if (info.role === 'operator') return next(new BatonError('FORBIDDEN', OPERATOR_ONLY));
    if (info.scope !== req.params.scope) return next(new BatonError('NOT_FOUND'));
    res.locals.apiKey = info;
    next();
  };
}

const OPERATOR_ONLY = 'An operator key may call only the operator routes (a scope\'s limits, whoami), never a scope\'s runs or data.';

/**
 * An operator route (access `operator`): an operator key, the only one that may call it. On a
 * scope's path (`:scope`), with `scopeAdmins` its admin keys may too (access
 * `admin-or-operator`: a scope's admin reads its limits). A key of the path's scope that may
 * not is 403; a key of another scope gets the 404 of authenticate(), so the route tells it
 * nothing about the scope in its path.
 */
export function authenticateOperator(store: ApiKeyStore, o: { scopeAdmins: boolean }): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    const info = await presentedKey(store, req);
    if (!info) return next(new BatonError('UNAUTHENTICATED'));
    const scope = req.params.scope as string | undefined;
    if (info.role !== 'operator') {
      if (scope === undefined || info.scope !== scope) return next(new BatonError(scope === undefined ? 'FORBIDDEN' : 'NOT_FOUND'));
      if (!o.scopeAdmins || info.role !== 'admin') return next(new BatonError('FORBIDDEN'));
    }
    res.locals.apiKey = info;
    next();
  };
}

/**
 * A route a stream token opens (access `stream`, a run's events): a key of the path's scope,
 * exactly as authenticate() checks it, or, when no key is presented, `?access_token=` holding
 * a token for the path's run or its session (a chat's routes: for the chat's session). A token is never taken from Authorization, so
 * it cannot pass for a key anywhere. Every token that does not open this run (unknown,
 * expired, of another run, session or scope, minted by a revoked key) gets the answer a
 * request without credentials gets: nothing tells a refused token from a missing one.
 */
export function authenticateKeyOrStreamToken(keys: ApiKeyStore, tokens: StreamTokenStore): RequestHandler {
  const byKey = authenticate(keys);
  return async (req: Request, res: Response, next: NextFunction) => {
    if (req.headers.authorization !== undefined) return byKey(req, res, next);
    const token = req.query.access_token;
    const { scope, runId, chatId } = req.params as { scope?: string; runId?: string; chatId?: string };
    // A chat's routes name its session (chatId): a token for that session opens them.
    const keyId = typeof token !== 'string' || scope === undefined ? undefined
      : runId !== undefined ? await tokens.openerOf(scope, runId, token)
        : chatId !== undefined ? await tokens.sessionOpenerOf(scope, chatId, token) : undefined;
    // The stream counts as the token's (its cap) and ends with its key's streams (revocation).
    if (keyId) res.locals.streamCredential = { credential: `token:${createHash('sha256').update(token as string).digest('hex')}`, keyId };
    next(keyId ? undefined : new BatonError('UNAUTHENTICATED', 'An API key of this scope, or a stream token for this run, is required.'));
  };
}

/**
 * A valid key of any scope (401 otherwise), for routes that name no scope: they answer
 * only about the key itself, so nothing of another scope can be learnt through them.
 */
export function identify(store: ApiKeyStore): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    const info = await presentedKey(store, req);
    if (!info) return next(new BatonError('UNAUTHENTICATED'));
    res.locals.apiKey = info;
    next();
  };
}

/** The key of `Authorization: Bearer <key>`, if it is well-formed, issued and not revoked. */
async function presentedKey(store: ApiKeyStore, req: Request): Promise<ApiKeyInfo | undefined> {
  const header = authorizationHeader.safeParse(req.headers.authorization);
  if (!header.success) return undefined;
  return store.verify(header.data.slice('Bearer '.length));
}

/** 403 unless the request's key has `role` (admin may do everything a client may). */
export function requireRole(role: 'admin'): RequestHandler {
  return (_req, res, next) => {
    const key = res.locals.apiKey as ApiKeyInfo | undefined;
    if (!key || (role === 'admin' && key.role !== 'admin')) return next(new BatonError('FORBIDDEN'));
    next();
  };
}
