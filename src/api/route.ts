import express, { Router, type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { BatonError } from '../lib/errors.ts';
import type { z } from 'zod';
import type { ErrorCode } from '../lib/contract/errors.ts';
import type { ApiKeyInfo } from '../lib/tenancy/api-keys.ts';
import type { AppDeps } from './deps.ts';
import { authenticateKeyOrStreamToken, authenticateOperator, identify, requireRole } from './auth.ts';
import { corsFor } from './cors.ts';
import { emptyBody, emptyParams, emptyQuery } from './schemas.ts';
import { parse } from './validate.ts';
import { carriesBody, checkJsonBytes, minimumBodyRate } from './request-guards.ts';
import { readRawBody } from './raw-body.ts';

/**
 * A route of the catalogue (routes.ts): how it is called, what it answers, who may call it,
 * and its handler. The same entry validates requests (mount below), documents the route
 * (/openapi.json) and feeds the cross-tenant and fuzz tests, so a route cannot exist in one
 * of those and not the others. A handler gets parsed input and makes one domain call.
 */

/** Where a scope's routes live; every route under it needs a key of that scope. */
export const SCOPE = '/v1/scopes/:scope';

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
/**
 * public: no key; key: any valid key, of any scope, or an operator key; client: any key of
 * the scope; admin: an admin key of the scope; stream: any key of the scope, or a stream token
 * for the run in the path (a browser page's read-only pass), from pages of the CORS_ORIGINS
 * too; token: no key, the capability token in the path is the credential (a wait's resume
 * token: it opens that one wait once, and the handler checks it); operator: an operator key
 * only (bound to no scope: what an operator governs, such as a scope's limits);
 * admin-or-operator: on a scope's path, an operator key or an admin key of that scope.
 * An operator key may call the operator routes and `key` routes, and no other.
 */
export type Access = 'public' | 'key' | 'client' | 'admin' | 'stream' | 'token' | 'operator' | 'admin-or-operator';

/** Access levels an operator key passes (besides `key`). */
export const OPERATOR_ACCESS: readonly Access[] = ['operator', 'admin-or-operator'];

/** What a handler answers: JSON with a status (200 by default), or nothing when it wrote the response itself. */
export interface Reply { status?: number; body?: unknown; headers?: Record<string, string> }

export interface RouteInput<P, Q, B> {
  params: P;
  query: Q;
  body: B;
  /** The headers the route declares, parsed (absent ones undefined), by lower-case name. */
  headers: Record<string, string | undefined>;
  /** The body as sent, before parsing (for checks zod cannot express, like "present but null"). */
  rawBody: unknown;
  /** The caller's key (any route that takes one). */
  key: ApiKeyInfo | undefined;
  /** The HTTP exchange, for the few routes that stream. */
  http: { req: Request; res: Response };
  /** Aborts when the client goes away before the answer: work queued for it is dropped (a schema check). */
  signal: AbortSignal;
  /** Access `token`: what `open` found the path's token opens. */
  opened: unknown;
}

export interface RouteSpec<P extends z.ZodType = z.ZodType, Q extends z.ZodType = z.ZodType, B extends z.ZodType = z.ZodType> {
  method: Method;
  /** Express syntax (`/v1/scopes/:scope/runs/:runId`); shown as `{scope}` in the document. */
  path: string;
  summary: string;
  access: Access;
  params?: P;
  query?: Q;
  body?: B;
  /** A raw body of any media type (instead of a JSON `body`), read by the handler itself. */
  rawBody?: { description: string };
  /**
   * A page of another origin (CORS_ORIGINS) may call it, sending these request headers (a
   * preflight allows them): answered before authentication, as a `stream` route's CORS is.
   */
  cors?: { headers: readonly string[] };
  /** Headers the route reads besides Authorization, with their schemas. */
  headers?: Record<string, z.ZodType<string>>;
  /** Success answers: status -> description and schema (JSON unless contentType says otherwise). */
  ok: Record<number, { description: string; schema?: z.ZodType; contentType?: string }>;
  /** Error codes this route can answer besides the ones every route of its kind can. */
  errors?: ErrorCode[];
  /**
   * A costly read (a scope's route whose answer may reach PAGE_MAX_BYTES: history pages,
   * listings): refused with 429 READ_RATE_LIMITED while its scope's read budget is in debt, and
   * its answer's bytes are charged to that budget as they are sent (src/lib/tenancy/read-budget.ts).
   */
  readCost?: true;
  /**
   * Access `token`: looks up what the token in the path opens, after the params are parsed
   * and before the body is read, and throws when it opens nothing; so a made-up token costs
   * its headers only, as a request without a key does. The result is the handler's `opened`.
   */
  open?(params: unknown, d: AppDeps): Promise<unknown>;
  handler(input: RouteInput<z.output<P>, z.output<Q>, z.output<B>>, d: AppDeps): Promise<Reply | void> | Reply | void;
}

/** Declares a route with its handler typed by its schemas. */
export function route<
  P extends z.ZodType = typeof emptyParams, Q extends z.ZodType = typeof emptyQuery, B extends z.ZodType = typeof emptyBody,
>(spec: RouteSpec<P, Q, B>): RouteSpec {
  return spec as unknown as RouteSpec;
}

/**
 * An Express router serving `routes` whose paths start with `prefix` (the router is mounted
 * there, behind authentication for a scope's `client` and `admin` routes; a `stream` route
 * answers CORS and checks its key or token itself, an operator route its key). Each route checks the role, reads its
 * body (JSON up to `jsonLimit` bytes, unless the route takes a raw body), parses params,
 * query, body and declared headers with its schemas (a route without a query or a body
 * refuses one), then calls its handler. So a body is read only once the key has been
 * checked: an unauthenticated request costs its headers and nothing more.
 */
export function mountRoutes(routes: readonly RouteSpec[], prefix: string, d: AppDeps, o: { jsonLimit?: number } = {}): Router {
  const r = Router({ mergeParams: true });
  // A router that reads bodies (it was given a JSON limit) holds them to the minimum rate too.
  const bodyRate: RequestHandler[] = o.jsonLimit === undefined ? [] : [minimumBodyRate(d.config.BODY_MIN_BYTES_PER_SEC)];
  const json: RequestHandler[] = o.jsonLimit === undefined
    ? []
    : [requireJsonBody, express.json({
      limit: o.jsonLimit, strict: true, type: () => true, verify: checkJsonBytes(d.config.BODY_MAX_DEPTH),
    })];
  for (const spec of routes) {
    if (!spec.path.startsWith(prefix)) throw new Error(`route ${spec.path} is not under ${prefix}`);
    const path = spec.path.slice(prefix.length) || '/';
    // A page of another origin calls it: its CORS answer comes first, for every method and
    // errors included (`all` routes are middleware of the path, not routes of the document).
    if (spec.access === 'stream') r.all(path, corsFor(d.config.CORS_ORIGINS, spec.method, spec.cors?.headers));
    const guards: RequestHandler[] = [
      ...(spec.access === 'key' ? [identify(d.apiKeys)] : []),
      ...(spec.access === 'stream' ? [authenticateKeyOrStreamToken(d.apiKeys, d.streamTokens)] : []),
      ...(spec.access === 'admin' ? [requireRole('admin')] : []),
      ...(OPERATOR_ACCESS.includes(spec.access) ? [authenticateOperator(d.apiKeys, { scopeAdmins: spec.access === 'admin-or-operator' })] : []),
      ...(spec.open ? [openToken(spec, d)] : []),
      ...bodyRate,
      ...(spec.access === 'public' ? refuseBody(o.jsonLimit) : spec.rawBody ? [] : json),
    ];
    r[spec.method](path, ...guards, async (req, res) => {
      const params = parse(spec.params ?? emptyParams, req.params, 'params');
      const query = parse(spec.query ?? emptyQuery, req.query, 'query');
      const body = parse(spec.body ?? emptyBody, req.body, 'body');
      const headers: Record<string, string | undefined> = {};
      for (const [name, schema] of Object.entries(spec.headers ?? {})) {
        const value = req.headers[name.toLowerCase()];
        headers[name.toLowerCase()] = value === undefined ? undefined : parse(schema, value, 'headers');
      }
      const key = res.locals.apiKey as ApiKeyInfo | undefined;
      const input = {
        params, query, body, headers, rawBody: req.body, key, http: { req, res }, signal: clientGone(res), opened: res.locals.opened,
      };
      const scope = spec.readCost ? (params as { scope: string }).scope : undefined;
      if (scope !== undefined) await d.reads.admit(scope);
      const reply = await spec.handler(input, d);
      if (!reply || res.headersSent) return;
      res.status(reply.status ?? 200).set(reply.headers ?? {});
      if (reply.body === undefined) {
        res.end();
      } else if (scope !== undefined) {
        // As res.json writes it, once: the bytes charged are the bytes sent. Sent first, then
        // charged: a page held through the charge's round trip cost an API process 50 to 100 MiB
        // more at its peak under aborted listings (test/bytes-limits.test.ts); the charge still
        // ends the handler, so the next read this process admits sees its answer.
        const text = JSON.stringify(reply.body);
        const bytes = Buffer.byteLength(text);
        if (!res.get('Content-Type')) res.type('json');
        res.send(text);
        await d.reads.charge(scope, bytes);
      } else {
        res.json(reply.body);
      }
    });
  }
  return r;
}

/**
 * The CORS answers of `routes` whose paths start with `prefix` and that are not `stream` routes
 * (those answer their own): mounted before the scope's key check, so a browser's preflight,
 * which carries no key, is answered, and every answer to a listed origin says so.
 */
export function mountCors(routes: readonly RouteSpec[], prefix: string, d: AppDeps): Router {
  const r = Router({ mergeParams: true });
  for (const spec of routes) {
    if (!spec.cors || spec.access === 'stream') continue;
    r.all(spec.path.slice(prefix.length) || '/', corsFor(d.config.CORS_ORIGINS, spec.method, spec.cors.headers));
  }
  return r;
}

/** The params parsed and the token opened (spec.open), before the body is read. */
function openToken(spec: RouteSpec, d: AppDeps): RequestHandler {
  return async (req, res, next) => {
    try {
      res.locals.opened = await spec.open!(parse(spec.params ?? emptyParams, req.params, 'params'), d);
      next();
    } catch (err) {
      next(err);
    }
  };
}

/**
 * Aborts when the response's connection closes before the response was finished: the client
 * went away (or the connection was cut), and nobody will read the answer.
 */
function clientGone(res: Response): AbortSignal {
  const gone = new AbortController();
  const close = () => {
    if (!res.writableFinished) gone.abort(new BatonError('CLIENT_CLOSED'));
  };
  // The connection went before 'close' could be listened for.
  if (res.socket?.destroyed) close();
  else res.once('close', close);
  return gone.signal;
}

/**
 * The public routes take no body, and one that comes is refused; it is read to its end first
 * (never parsed, at most `limit` bytes), so the answer does not race a client still sending
 * it: a connection closed with unread bytes in it is reset, and the client may lose the answer.
 */
function refuseBody(limit: number | undefined): RequestHandler[] {
  if (limit === undefined) return [];
  return [(req, _res, next) => {
    if (!carriesBody(req)) return next();
    readRawBody(req, limit).then(
      () => next(new BatonError('VALIDATION_FAILED', undefined, [{ path: 'body', message: 'this route takes no body' }])),
      next,
    );
  }];
}

/** A request that carries a body must say it is JSON, in UTF-8 (or no charset); bodyless requests pass. */
function requireJsonBody(req: Request, _res: Response, next: NextFunction): void {
  const hasBody = carriesBody(req);
  if (hasBody && !req.is('application/json')) return next(new BatonError('UNSUPPORTED_MEDIA_TYPE'));
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers['content-type'] ?? '')?.[1]?.toLowerCase();
  if (hasBody && charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') return next(new BatonError('UNSUPPORTED_MEDIA_TYPE'));
  next();
}
