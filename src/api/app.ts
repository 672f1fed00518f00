import express, { type Express, type Response } from 'express';
import helmet from 'helmet';
import { BatonError } from '../lib/errors.ts';
import type { AppDeps } from './deps.ts';
import { authenticate } from './auth.ts';
import { refuseRepeatedHeaders } from './request-guards.ts';
import { errorHandler } from './error-handler.ts';
import { mountTemplate, observeRequests } from './http-metrics.ts';
import { mountCors, mountRoutes, OPERATOR_ACCESS, SCOPE } from './route.ts';
import { ROUTES } from './routes.ts';
import { openAiErrorHandler } from './openai-errors.ts';
import { isOpenAiRoute, OPENAI_PATHS } from './routes-openai.ts';

/** Builds the HTTP API from the route catalogue: public routes at the root, a scope's routes behind its key. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  // No ETag: answers to submits and reads are not cached, and hashing each body costs CPU.
  app.set('etag', false);
  // A JSON answer leaves in one write: Express hands Node its head and its body apart, and each
  // write reaches the socket at once (a syscall, and a wakeup of a reader on the same machine).
  const json = app.response.json;
  app.response.json = function corkedJson(this: Response, body: unknown) {
    this.cork();
    try {
      return json.call(this, body);
    } finally {
      this.uncork();
    }
  };
  app.use(helmet());

  app.use(observeRequests(deps.metrics, deps.log));
  app.use(refuseRepeatedHeaders);
  // OpenAI's API (routes-openai.ts): the key names the scope, and errors are in OpenAI's shape.
  const openAi = ROUTES.filter(isOpenAiRoute);
  app.use(mountRoutes(openAi, '', deps, { jsonLimit: deps.config.BODY_LIMIT_BYTES }));
  app.use(OPENAI_PATHS, (_req, _res, next) => next(new BatonError('NOT_FOUND')));
  app.use(openAiErrorHandler(deps.log));
  // Routes outside a scope: the public ones, those any valid key may call (whoami), and those a token opens.
  const unscoped = ROUTES.filter((r) => (r.access === 'public' || r.access === 'key' || r.access === 'token') && !isOpenAiRoute(r));
  app.use(mountRoutes(unscoped, '', deps, { jsonLimit: deps.config.BODY_LIMIT_BYTES }));
  // Routes a stream token opens check a key or a token themselves, so they come before the
  // scope's key check; any other request falls through to it.
  const byToken = ROUTES.filter((r) => r.access === 'stream');
  app.use(SCOPE, mountTemplate(SCOPE), mountRoutes(byToken, SCOPE, deps, { jsonLimit: deps.config.BODY_LIMIT_BYTES }));
  // Operator routes check their key themselves (an operator's, or on a scope's path perhaps
  // its admin's), so those on a scope's path come before the scope's key check too.
  const byOperator = ROUTES.filter((r) => OPERATOR_ACCESS.includes(r.access));
  const operatorScoped = byOperator.filter((r) => r.path.startsWith(`${SCOPE}/`));
  app.use(mountRoutes(byOperator.filter((r) => !operatorScoped.includes(r)), '', deps, { jsonLimit: deps.config.BODY_LIMIT_BYTES }));
  app.use(SCOPE, mountTemplate(SCOPE), mountRoutes(operatorScoped, SCOPE, deps, { jsonLimit: deps.config.BODY_LIMIT_BYTES }));
  // The key first, then the body: each scope route reads its own body after authenticate().
  const scoped = ROUTES.filter((r) => r.access === 'client' || r.access === 'admin');
  // A page's preflight carries no key: the CORS answers of the scope's routes pages call come first.
  app.use(SCOPE, mountCors(scoped, SCOPE, deps));
  app.use(
    SCOPE, mountTemplate(SCOPE), authenticate(deps.apiKeys),
    mountRoutes(scoped, SCOPE, deps, { jsonLimit: deps.config.BODY_LIMIT_BYTES }),
  );
  app.use((_req, _res, next) => next(new BatonError('NOT_FOUND')));
  app.use(errorHandler(deps.log));
  return app;
}
