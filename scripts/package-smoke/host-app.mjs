// An Express 5 application of its own that serves Baton under /agents, on its own server and
// with its own Prometheus registry, and runs a worker in the same process.
//   REDIS_URL=... RUNTIME=smoke-host node host-app.mjs    prints "host app listening on <url>"
import express from 'express';
import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import { builtinAgents, createBatonRouter, createLogger, loadAgents, loadConfig, startWorker } from 'baton-agents/server';

const config = loadConfig();
const log = createLogger(config.LOG_LEVEL);
const registry = new Registry();
collectDefaultMetrics({ register: registry });
const hellos = new Counter({ name: 'host_hello_total', help: 'Hellos served.', registers: [registry] });

const baton = await createBatonRouter({ config, log, registry });
// The worker shares the router's composition root: its connections, sweeper and metrics.
const worker = await startWorker({ resources: baton.resources, agents: await loadAgents([], builtinAgents(config)) });

const app = express();
app.get('/hello', (_req, res) => {
  hellos.inc();
  res.json({ hello: 'from the host app' });
});
app.get('/metrics', async (_req, res) => {
  res.type(registry.contentType).send(await registry.metrics());
});
app.use('/agents', baton.router);

const server = app.listen(0, '127.0.0.1', () => console.log(`host app listening on http://127.0.0.1:${server.address().port}`));
process.once('SIGTERM', async () => {
  await worker.close();
  await baton.close();
  server.close(() => process.exit(0));
});
