import { Router } from 'express';
import { checkReadiness } from '../lib/ops/health.ts';
import type { AppDeps } from './deps.ts';

/**
 * Unauthenticated operations endpoints: /healthz (the process answers), /readyz (Redis
 * answers, and a worker hosted in the same process is registered), /metrics (Prometheus
 * text format). They expose no tenant data: metrics carry no scope label unless
 * METRICS_SCOPE_LABEL is set.
 */
export function opsRouter(d: Pick<AppDeps, 'metrics' | 'checks'>): Router {
  const r = Router();
  r.get('/healthz', (_req, res) => void res.json({ ok: true }));
  r.get('/readyz', async (_req, res) => {
    const report = await checkReadiness(d.checks);
    res.status(report.ok ? 200 : 503).set('cache-control', 'no-store').json(report);
  });
  r.get('/metrics', async (_req, res) => {
    const { contentType, body } = await d.metrics.expose();
    res.set('content-type', contentType).set('cache-control', 'no-store').send(body);
  });
  return r;
}
