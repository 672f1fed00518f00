import { beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { useHarness, type Harness } from './helpers/harness.ts';

/**
 * Invariant 12 for the operations surface: /metrics can be closed to all but the scraper,
 * and carries no label value a tenant chose. Before, a client could name any runtime in a
 * submit and it appeared, with its queue depth, on the unauthenticated /metrics.
 */
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

describe('METRICS_TOKEN', () => {
  it("/metrics of the API and of a worker answer only the token's bearer; the probes stay open", async () => {
    const token = 'scrape-token-0123456789';
    const api = await h.startApi({ METRICS_TOKEN: token });
    const worker = await h.startWorker({ env: { METRICS_TOKEN: token } });
    for (const base of [api.url, worker.opsUrl!]) {
      const none = await fetch(`${base}/metrics`);
      expect([base, none.status]).toEqual([base, 401]);
      expect((await none.json() as any).error.code).toBe('UNAUTHENTICATED');
      const wrong = await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer scrape-token-0123456788' } });
      expect([base, wrong.status]).toEqual([base, 401]);
      await wrong.text();
      const right = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${token}` } });
      expect([base, right.status]).toEqual([base, 200]);
      expect(await right.text()).toContain('baton_runs_submitted_total');
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
    }
    // Without the setting, /metrics is open as Prometheus expects.
    const open = await h.startApi();
    expect((await fetch(`${open.url}/metrics`)).status).toBe(200);
  });
});

describe('label values', () => {
  it('only runtimes and agents that workers registered become label values; anything a client names is _other', async () => {
    const api = await h.startApi();
    await h.startWorker();
    const acme = await h.client(api.url, 'acme', 'client');
    const ok = await acme.submit('labels', 'counted by name');
    expect(ok.status).toBe(202);
    // No worker serves these runtimes: accepted (they wait), with a warning.
    const madeUp = await acme.submit('labels-2', 'x', { runtime: 'tenant-chose-this-runtime' });
    const bogus = await acme.submit('labels-3', 'x', { runtime: 'another-invented-one', agent: 'tenant-chose-this-agent' });
    expect([madeUp.status, bogus.status]).toEqual([202, 202]);
    await acme.waitStatus(ok.body.id, ['succeeded']);
    const text = await (await fetch(`${api.url}/metrics`)).text();
    expect(text).not.toContain('tenant-chose-this-runtime');
    expect(text).not.toContain('another-invented-one');
    expect(text).not.toContain('tenant-chose-this-agent');
    expect(text).toMatch(new RegExp(`^baton_runs_submitted_total\\{runtime="${h.runtime}",agent="echo"\\} 1$`, 'm'));
    expect(text).toMatch(/^baton_runs_submitted_total\{runtime="_other",agent="_other"\} 1$/m);
    expect(text).toMatch(/^baton_runs_submitted_total\{runtime="_other",agent="echo"\} 1$/m);
    // Queue depth is read for the registered runtime only.
    const queues = [...text.matchAll(/^baton_queue_jobs\{runtime="([^"]+)"/gm)].map((m) => m[1]);
    expect(new Set(queues)).toEqual(new Set([h.runtime]));
  });
});

describe('a body sent to a public route', () => {
  it('is read to its end and refused with 400, so a client that closes the connection gets the whole answer', async () => {
    const api = await h.startApi();
    const { port } = new URL(api.url);
    const body = JSON.stringify({ padding: 'x'.repeat(6000) });
    for (const path of ['/healthz', '/metrics', '/openapi.json']) {
      const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = request({
          host: '127.0.0.1', port, method: 'GET', path, agent: false,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' },
        }, (r) => {
          let text = '';
          r.setEncoding('utf8');
          r.on('data', (c: string) => { text += c; });
          r.on('end', () => resolve({ status: r.statusCode ?? 0, text }));
          r.on('error', reject);
        });
        req.on('error', reject);
        req.end(body);
      });
      expect([path, res.status]).toEqual([path, 400]);
      expect(JSON.parse(res.text).error).toMatchObject({ code: 'VALIDATION_FAILED', details: [{ path: 'body' }] });
    }
    // Without a body, the same routes answer as always.
    expect((await fetch(`${api.url}/healthz`)).status).toBe(200);
  });
});
