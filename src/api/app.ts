import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { BatonError } from '../lib/errors.ts';
import type { AppDeps } from './deps.ts';
import { authenticate } from './auth.ts';
import { errorHandler } from './error-handler.ts';
import { mountTemplate, observeRequests } from './http-metrics.ts';
import { openApiDocument } from './openapi.ts';
import { adminRouter } from './routes-admin.ts';
import { opsRouter } from './routes-ops.ts';
import { runsRouter } from './routes-runs.ts';
import { stepsRouter } from './routes-steps.ts';
import { uiRouter } from './routes-ui.ts';
import { whoamiRouter } from './routes-whoami.ts';

/** Builds the HTTP API. Routes parse and authorize, call one src/lib function, and shape the answer. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.use(helmet());

  app.use(observeRequests(deps.metrics, deps.log));
  app.use(opsRouter(deps));
  app.get('/openapi.json', (_req, res) => void res.json(openApiDocument()));
  app.use(uiRouter());

  app.use('/v1', requireJsonBody, express.json({ limit: deps.config.BODY_LIMIT_BYTES, strict: true, type: () => true }));
  app.use(whoamiRouter(deps));
  app.use('/v1/scopes/:scope', mountTemplate('/v1/scopes/:scope'), authenticate(deps.apiKeys), runsRouter(deps), adminRouter(deps), stepsRouter(deps));
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
