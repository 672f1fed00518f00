import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Counter, Registry } from 'prom-client';
import { beforeAll, describe, expect, it } from 'vitest';
import { BatonClient, type RunStreamEvent } from '../src/client.ts';
import { createBatonRouter, type BatonRouter } from '../src/server.ts';
import { createLogger } from '../src/lib/logger.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

let h: Harness;
let baton: BatonRouter;
let registry: Registry;
let base: string;

/** A host application of its own: a route, a metric and /metrics, with Baton mounted under /agents. */
beforeAll(async () => {
  h = await useHarness();
  await h.startWorker();
  registry = new Registry();
  const hits = new Counter({ name: 'host_hello_total', help: 'Hellos served.', registers: [registry] });
  baton = await createBatonRouter({ config: h.config, redisUrl: h.redisUrl, log: createLogger('silent'), registry });
  track(baton, () => baton.close());
  const app = express();
  app.get('/hello', (_req, res) => {
    hits.inc();
    res.json({ hello: 'world' });
  });
  app.get('/metrics', async (_req, res) => void res.type(registry.contentType).send(await registry.metrics()));
  app.use('/agents', baton.router);
  const server: Server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  track(server, () => new Promise((resolve) => server.close(resolve)));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

describe('createBatonRouter in a host Express app', () => {
  it('serves the API under /agents next to the app\'s own routes, and a run streams to its end', async () => {
    expect(await (await fetch(`${base}/hello`)).json()).toEqual({ hello: 'world' });
    const client = new BatonClient({ url: `${base}/agents`, apiKey: await h.key('host'), scope: 'host' });
    const run = await client.submit({ sessionId: 's1', input: { content: 'mounted and streaming' }, runtime: h.runtime });
    const events: RunStreamEvent[] = [];
    for await (const e of client.stream(run.id)) events.push(e);
    expect(events.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded', result: { answer: 'mounted and streaming' } } });
    expect(events.flatMap((e) => (e.type === 'token' ? [e.data.text] : [])).join('')).toBe('mounted and streaming');

    // Baton's answers keep their shape under the mount; what is outside it stays the host's.
    const missing = await fetch(`${base}/agents/v1/scopes/host/nothing-here`, { headers: { authorization: `Bearer ${await h.key('host')}` } });
    expect(missing.status).toBe(404);
    expect((await missing.json()).error.code).toBe('NOT_FOUND');
    expect((await fetch(`${base}/agents/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/elsewhere`)).headers.get('content-type')).not.toMatch(/json/);
  });

  it('registers Baton\'s metrics in the host\'s registry, without a second set of process metrics', async () => {
    await fetch(`${base}/hello`);
    const text = await (await fetch(`${base}/metrics`)).text();
    expect(text).toMatch(/^host_hello_total \d+/m);
    expect(text).toMatch(/^baton_runs_submitted_total\{runtime="[^"]+",agent="echo"\} [1-9]/m);
    expect(text).toMatch(/^baton_http_request_duration_seconds_count\{method="POST",route="\/v1\/scopes\/:scope\/runs",status="202"\} [1-9]/m);
    expect(text).not.toMatch(/^process_cpu_user_seconds_total/m);
  });

  it('close() ends Baton\'s open event streams, then hands its path back to the host app', async () => {
    const own = await createBatonRouter({ config: h.config, redisUrl: h.redisUrl, log: createLogger('silent') });
    track(own, () => own.close());
    const app = express();
    app.use('/agents', own.router);
    app.use((_req, res) => void res.status(418).send('host'));
    const server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    track(server, () => new Promise((resolve) => server.close(resolve)));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/agents`;
    const client = new BatonClient({ url, apiKey: await h.key('host'), scope: 'host', maxReconnects: 0 });
    // A run of a runtime no worker serves: its stream stays open until something ends it.
    const run = await client.submit({ sessionId: 's2', input: { content: 'never runs' }, runtime: `${h.runtime}-idle` });
    const stream = client.stream(run.id);
    expect((await stream.next()).value).toMatchObject({ type: 'status' });
    const rest = (async () => { for await (const _ of stream) { /* drain */ } })();
    // Its rejection is awaited from now: the stream may end (and its reconnect be refused by the
    // host app) while close() is still under way.
    const ended = expect(rest).rejects.toThrow();
    await own.close();
    await ended;
    expect((await fetch(`${url}/healthz`)).status).toBe(418);
    await new Promise((resolve) => server.close(resolve));
  });
});
