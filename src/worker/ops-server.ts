import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { checkReadiness, type ReadinessCheck } from '../lib/ops/health.ts';
import type { Logger } from '../lib/logger.ts';
import type { Metrics } from '../lib/ops/metrics.ts';
import { metricsAuthorized } from '../lib/ops/metrics-auth.ts';

export interface OpsServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * A worker's operations endpoint on METRICS_PORT: /metrics for Prometheus, /healthz
 * (the process answers) and /readyz (Redis answers and this worker is registered on its
 * queue). Plain node:http: the worker serves no API, only these three probes.
 */
export async function startOpsServer(o: {
  host: string;
  port: number;
  metrics: Metrics;
  checks: readonly ReadinessCheck[];
  log: Logger;
  /** METRICS_TOKEN: /metrics answers only its bearer. */
  token?: string;
}): Promise<OpsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = (status: number, type: string, body: string) => {
      res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
      res.end(body);
    };
    const json = (status: number, body: unknown) => reply(status, 'application/json; charset=utf-8', JSON.stringify(body));
    if (req.method !== 'GET' && req.method !== 'HEAD') return json(405, { error: { code: 'METHOD_NOT_ALLOWED' } });
    if (path === '/healthz') return json(200, { ok: true });
    if (path === '/readyz') {
      void checkReadiness(o.checks).then((r) => json(r.ok ? 200 : 503, r));
      return;
    }
    if (path === '/metrics') {
      if (!metricsAuthorized(req.headers.authorization, o.token)) {
        res.setHeader('www-authenticate', 'Bearer');
        return json(401, { error: { code: 'UNAUTHENTICATED', message: 'A valid metrics token is required.', details: [] } });
      }
      o.metrics.expose().then(
        ({ contentType, body }) => reply(200, contentType, body),
        (err: Error) => {
          o.log.error({ err: err.message }, 'metrics scrape failed');
          json(500, { error: { code: 'INTERNAL', message: 'metrics collection failed' } });
        },
      );
      return;
    }
    json(404, { error: { code: 'NOT_FOUND' } });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = o.host.includes(':') ? `[${o.host}]` : o.host;
  const url = `http://${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${port}`;
  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    close() {
      closing ??= new Promise<void>((resolve) => {
        // Prometheus keeps its scrape connection alive; do not wait for it to go idle.
        server.closeAllConnections();
        server.close(() => resolve());
      });
      return closing;
    },
  };
}
