import { z } from 'zod';
import { checkReadiness } from '../lib/ops/health.ts';
import { metricsAuthorized } from '../lib/ops/metrics-auth.ts';
import { BatonError } from '../lib/errors.ts';
import * as res from './response-schemas.ts';
import { route, type RouteSpec } from './route.ts';

/**
 * Unauthenticated operations endpoints: /healthz (the process answers), /readyz (Redis
 * answers, and a worker hosted in the same process is registered), /metrics (Prometheus
 * text format; behind METRICS_TOKEN when it is set). They expose no tenant data: metrics
 * carry no scope label unless METRICS_SCOPE_LABEL is set, and runtime and agent labels only
 * name what workers registered.
 */
export const opsRoutes: RouteSpec[] = [
  route({
    method: 'get', path: '/healthz', summary: 'Liveness: the process serves HTTP.', access: 'public',
    ok: { 200: { description: 'alive', schema: res.healthResponse } },
    handler: () => ({ body: { ok: true } }),
  }),
  route({
    method: 'get', path: '/readyz', summary: 'Readiness: Redis answers (and a worker in this process is registered).', access: 'public',
    ok: { 200: { description: 'ready', schema: res.healthResponse }, 503: { description: 'not ready', schema: res.healthResponse } },
    async handler(_i, d) {
      const report = await checkReadiness(d.checks);
      return { status: report.ok ? 200 : 503, headers: { 'cache-control': 'no-store' }, body: report };
    },
  }),
  route({
    method: 'get', path: '/metrics', summary: 'Prometheus metrics (no tenant data unless METRICS_SCOPE_LABEL; with METRICS_TOKEN, only for its bearer).',
    access: 'public',
    ok: { 200: { description: 'Prometheus text format', schema: z.string(), contentType: 'text/plain' } },
    errors: ['UNAUTHENTICATED'],
    async handler({ http: { req, res: out } }, d) {
      if (!metricsAuthorized(req.headers.authorization, d.config.METRICS_TOKEN)) throw new BatonError('UNAUTHENTICATED');
      const { contentType, body } = await d.metrics.expose();
      out.set('content-type', contentType).set('cache-control', 'no-store').send(body);
    },
  }),
];
