import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { ApiKeyInfo, ApiKeyStore, Role } from '../lib/tenancy/api-keys.ts';
import { BatonError } from '../lib/errors.ts';
import { authorizationHeader } from './schemas.ts';

/**
 * Every /v1/scopes/:scope route: a valid key (401 otherwise) of this very scope. A key of
 * another scope gets the same 404 a missing object gets, so it learns nothing about
 * what exists elsewhere.
 */
export function authenticate(store: ApiKeyStore): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    const header = authorizationHeader.safeParse(req.headers.authorization);
    if (!header.success) return next(new BatonError('UNAUTHENTICATED'));
    const info = await store.verify(header.data.slice('Bearer '.length));
    if (!info) return next(new BatonError('UNAUTHENTICATED'));
    if (info.scope !== req.params.scope) return next(new BatonError('NOT_FOUND'));
    res.locals.apiKey = info;
    next();
  };
}

/** 403 unless the request's key has `role` (admin may do everything a client may). */
export function requireRole(role: Role): RequestHandler {
  return (_req, res, next) => {
    const key = res.locals.apiKey as ApiKeyInfo | undefined;
    if (!key || (role === 'admin' && key.role !== 'admin')) return next(new BatonError('FORBIDDEN'));
    next();
  };
}
