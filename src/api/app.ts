import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { BatonError } from '../lib/errors.ts';
import type { AppDeps } from './deps.ts';
import { authenticate } from './auth.ts';
import { errorHandler } from './error-handler.ts';
import { mountTemplate, observeRequests } from './http-metrics.ts';
import { mountRoutes } from './route.ts';
import { ROUTES } from './routes.ts';
import { SCOPE } from './routes-runs.ts';

/** Builds the HTTP API from the route catalogue: public routes at the root, a scope's routes behind its key. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.use(helmet());

  app.use(observeRequests(deps.metrics, deps.log));
  app.use(mountRoutes(ROUTES.filter((r) => r.access === 'public'), '', deps));
  app.use('/v1', requireJsonBody, express.json({ limit: deps.config.BODY_LIMIT_BYTES, strict: true, type: () => true }));
  app.use(SCOPE, mountTemplate(SCOPE), authenticate(deps.apiKeys), mountRoutes(ROUTES.filter((r) => r.access !== 'public'), SCOPE, deps));
  app.use((_req, _res, next) => next(new BatonError('NOT_FOUND')));
  app.use(errorHandler(deps.log));
  return app;
}

/** A request that carries a body must say it is JSON; bodyless requests pass. */
function requireJsonBody(req: Request, _res: Response, next: NextFunction): void {
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (hasBody && !req.is('application/json')) return next(new BatonError('UNSUPPORTED_MEDIA_TYPE'));
  next();
}
