import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, posix, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { Agent } from '../src/lib/sdk/agent.ts';
import { ROOT, useHarness, sleep, waitFor } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { startPrometheus, type PromSeries, type RunningPrometheus } from './helpers/prometheus.ts';
import { skipWithout } from './helpers/programs.ts';
import { broken, flaky } from './fixtures/metrics-agents.ts';

const read = (p: string) => readFileSync(join(ROOT, p), 'utf8');
const dashboard = JSON.parse(read('grafana/dashboards/baton.json'));
// Compose resolves `<<:` merge keys (YAML 1.1); the yaml package does so only when asked.
const compose = parseYaml(read('docker-compose.yml'), { merge: true });
const datasources = parseYaml(read('grafana/provisioning/datasources/prometheus.yml'));
const providers = parseYaml(read('grafana/provisioning/dashboards/baton.yml'));
const promConfig = parseYaml(read('grafana/prometheus.yml'));

interface Panel {
  id: number; type: string; title: string; datasource?: { uid: string };
  targets?: { expr: string; legendFormat?: string; datasource?: { uid: string } }[]; gridPos: { x: number; w: number };
}
const panels: Panel[] = dashboard.panels;
const exprs = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr, legend: t.legendFormat ?? '' })));

/**
 * What Grafana does before it sends a query: its interval variable becomes a duration long
 * enough for the test's 1 s scrapes, and the runtime variable's "All" becomes `.*`.
 */
function promql(expr: string): string {
  const q = expr.replaceAll('$__rate_interval', '30s').replaceAll('$runtime', '.*');
  if (q.includes('$')) throw new Error(`unresolved Grafana variable in: ${expr}`);
  return q;
}

/**
 * A series' name in the legend, as Grafana renders a legend format: a label the series lacks
 * prints as the label's own name (renderLegendFormat in Grafana's Prometheus datasource).
 */
function legendOf(format: string, metric: Record<string, string>): { text: string; missing: string[] } {
  const missing: string[] = [];
  const text = format.replace(/\{\{\s*(.+?)\s*\}\}/g, (_, label: string) => {
    if (metric[label]) return metric[label];
    missing.push(label);
    return label;
  });
  return { text, missing };
}

/** `./x` volume sources of a service, resolved against the repository. */
function bindMounts(service: { volumes?: string[] }): { source: string; target: string }[] {
  return (service.volumes ?? [])
    .map((v) => v.split(':'))
    .filter(([source]) => source.startsWith('./'))
    .map(([source, target]) => ({ source: resolve(ROOT, source), target }));
}

/**
 * Panels that count what went wrong: on a healthy stack each of their series reads 0 (a
 * flat line), never "No data", which would look the same as a broken scrape.
 */
const ZERO_ON_HEALTHY = [
  'Retries / s', 'Lease recoveries', 'Blocked runs', 'Failed runs / s', 'HTTP errors / s',
  'Redis errors and reconnects', 'Model calls refused by token budget', 'Rate-limit pauses',
];

/** Panels that read something other than 0 on a stack that has run nothing yet: processes, scrapes, the workers' slots. */
const NONZERO_WHEN_IDLE = ['CPU', 'Resident memory', 'Event loop lag p99', 'HTTP p95 by route', 'Scope slots and fair share'];

/** The provider rate-limit panels: on a deployment without RATE_LIMITS each draws one 0 line saying so. */
const RATE_LIMIT_PANELS = ['Rate-limit wait by bucket', 'Rate-limit bucket fill', 'Rate-limit pauses'];

/** A provider rate-limit bucket, as a deployment that calls a model has: its series exist from the start. */
const WITH_BUCKET = { RATE_LIMITS: 'dashboard:bucket=rpm:60,tpm:6000' };

/**
 * An API and a worker serving `agents`, scraped every second by a real Prometheus. The worker
 * gets `workerEnv` (by default a provider bucket no model call takes from here; `{}`: the defaults).
 */
async function scrapedStack(agents: Agent[] = [], workerEnv: Record<string, string> = WITH_BUCKET) {
  const h = await useHarness();
  const api = await h.startApi();
  const worker = await h.startWorker({ agents, env: workerEnv });
  const acme = await h.client(api.url, 'acme', 'client');
  const hostPort = (url: string) => new URL(url).host;
  const prom = await startPrometheus({ 'baton-api': [hostPort(api.url)], 'baton-worker': [hostPort(worker.opsUrl!)] });
  const targets = await waitForTargets(prom.get, 2);
  console.log(`prometheus ${prom.url} scraping ${targets.join(', ')}`);
  return { h, api, acme, prom };
}

/**
 * Evaluates every expression of the dashboard until each returns a series (counters first seen
 * in a scrape need a second sample before rate() sees them) or 40 s pass; returns those that
 * returned none, and the series whose legend would print a label's name for a label they lack.
 */
async function evaluateAll(prom: RunningPrometheus): Promise<{ empty: string[]; unnamed: string[] }> {
  const started = Date.now();
  for (;;) {
    const empty: string[] = [];
    const unnamed: string[] = [];
    for (const { panel, expr, legend } of exprs) {
      const series = await prom.query(promql(expr));
      if (series.length === 0) empty.push(`${panel}: ${expr}`);
      for (const s of series) {
        const { missing } = legendOf(legend, s.metric);
        if (missing.length > 0) unnamed.push(`${panel}: ${legend} lacks ${missing.join(', ')} in ${JSON.stringify(s.metric)}`);
      }
    }
    if (empty.length === 0 || Date.now() - started > 40_000) {
      console.log(`${exprs.length} dashboard expressions evaluated, ${empty.length} without a series, after ${Date.now() - started} ms`);
      return { empty, unnamed };
    }
    await sleep(1_000);
  }
}

/** Series of the `titles` panels that do not read 0. */
async function notZero(prom: RunningPrometheus, titles: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const title of titles) {
    const targets = exprs.filter((e) => e.panel === title);
    expect(targets.length, `a panel titled ${title}`).toBeGreaterThan(0);
    for (const { expr } of targets) {
      for (const s of await prom.query(promql(expr))) {
        if (Number(s.value[1]) !== 0) out.push(`${title}: ${JSON.stringify(s)}`);
      }
    }
  }
  return out;
}

/** The (first) expression of a panel, by its title. */
const panel = (title: string) => exprs.find((e) => e.panel === title)!;

/** Sum of an instant query's samples (its one series, or none: 0). */
async function total(prom: RunningPrometheus, expr: string): Promise<number> {
  return (await prom.query(expr)).reduce((sum, s) => sum + Number(s.value[1]), 0);
}

/** Without Prometheus (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noPrometheus = skipWithout('prometheus');

describe.skipIf(noPrometheus)('the Grafana dashboard against a real Prometheus', () => {
  it('on a healthy stack every PromQL expression of the dashboard returns a series, and the error panels read 0', async () => {
    const { h, acme, prom } = await scrapedStack();

    // Healthy traffic only: successful runs that stream tokens, one of them read over SSE.
    // No failing agent, no retry, no 4xx or 5xx.
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await acme.submit(`s${i}`, 'tokens for the dashboard', { metadata: { delayMs: 20 } })).body.id);
    const sse = await acme.sse(`/runs/${ids[0]}/events`);
    expect(sse.ended).toBe(true);
    for (const id of ids) await acme.waitStatus(id, ['succeeded']);

    const { empty, unnamed } = await evaluateAll(prom);
    expect(empty, `expressions without a series:\n${empty.join('\n')}`).toEqual([]);
    expect(unnamed, 'series whose legend names a label they lack').toEqual([]);

    // Every series of the panels counting what went wrong reads 0.
    expect(await notZero(prom, ZERO_ON_HEALTHY), 'error panels that do not read 0 on healthy traffic').toEqual([]);
    // No route has an error series yet: the HTTP errors panel draws its one 0 line, named "none (any route)".
    const httpErrors = await prom.query(promql(panel('HTTP errors / s').expr));
    expect(httpErrors.map((s) => legendOf(panel('HTTP errors / s').legend, s.metric).text)).toEqual(['none (any route)']);
    // The bucket is configured: its panels draw it, not the line saying none is.
    for (const { expr } of exprs.filter((e) => RATE_LIMIT_PANELS.includes(e.panel))) {
      expect((await prom.query(promql(expr))).map((s) => s.metric.bucket)).toContain('dashboard:bucket');
    }

    // The numbers went through Prometheus intact, and the runtime variable offers this runtime.
    expect(await total(prom, `sum(baton_runs_submitted_total{runtime="${h.runtime}"})`)).toBe(3);
    expect(await total(prom, `sum(baton_runs_finished_total{runtime="${h.runtime}", status="succeeded"})`)).toBe(3);
    expect(await total(prom, promql(panel('Success ratio (1h)').expr))).toBe(1);
    const values = await prom.get<string[]>('/api/v1/label/runtime/values?match[]=baton_runs_started_total');
    expect(values).toContain(h.runtime);
    await prom.stop();
  });

  it('on a fresh deployment (the defaults: no provider bucket, no run yet) every expression returns a series, reading 0 where it counts', async () => {
    const { prom } = await scrapedStack([], {});
    const { empty, unnamed } = await evaluateAll(prom);
    expect(empty, `expressions without a series:\n${empty.join('\n')}`).toEqual([]);
    expect(unnamed, 'series whose legend names a label they lack').toEqual([]);

    // Nothing has run: every panel but those of processes and slots reads 0, or NaN where it is
    // a ratio or percentile of no runs (Grafana lists the series and draws no line).
    const idle = panels.filter((p) => p.targets && !NONZERO_WHEN_IDLE.includes(p.title)).map((p) => p.title);
    const notIdle: string[] = [];
    for (const { panel: title, expr } of exprs.filter((e) => idle.includes(e.panel))) {
      for (const s of await prom.query(promql(expr))) {
        if (s.value[1] !== '0' && s.value[1] !== 'NaN') notIdle.push(`${title}: ${JSON.stringify(s)}`);
      }
    }
    expect(notIdle, 'series that do not read 0 (or NaN) before any run').toEqual([]);
    expect(await notZero(prom, [...ZERO_ON_HEALTHY, ...RATE_LIMIT_PANELS])).toEqual([]);

    // No bucket: each rate-limit query draws one 0 line saying so, as its legend renders it.
    const lines: string[] = [];
    for (const { expr, legend } of exprs.filter((e) => RATE_LIMIT_PANELS.includes(e.panel))) {
      for (const s of await prom.query(promql(expr))) lines.push(legendOf(legend, s.metric).text);
    }
    console.log('rate-limit panels without a bucket:', JSON.stringify(lines));
    expect(lines).toEqual([
      'p50 none configured (RATE_LIMITS)', 'p95 none configured (RATE_LIMITS)',
      'none configured (RATE_LIMITS)', 'none configured (RATE_LIMITS)',
    ]);
    expect(await total(prom, 'max(baton_rate_limit_buckets)')).toBe(0);
    await prom.stop();
  });

  it('a retry, a failed run and a 401 reach the error panels with their numbers', async () => {
    const { h, api, acme, prom } = await scrapedStack([flaky, broken]);
    const ok = (await acme.submit('s', 'one success')).body.id;
    const retried = (await acme.submit('f', 'x', { agent: 'flaky' })).body.id;
    const failed = (await acme.submit('b', 'x', { agent: 'broken' })).body.id;
    await acme.waitStatus(ok, ['succeeded']);
    await acme.waitStatus(retried, ['succeeded']);
    await acme.waitStatus(failed, ['failed']);
    expect((await call(api.url, 'GET', '/v1/scopes/acme/nothing-here')).status).toBe(401);

    // Both processes' counters, once Prometheus has scraped each after the work was done.
    const rt = `runtime="${h.runtime}"`;
    const counts = async () => ({
      submitted: await total(prom, `sum(baton_runs_submitted_total{${rt}})`),
      retries: await total(prom, `sum(baton_run_retries_total{${rt}})`),
      failed: await total(prom, `sum(baton_runs_finished_total{${rt}, status="failed"})`),
      succeeded: await total(prom, `sum(baton_runs_finished_total{${rt}, status="succeeded"})`),
    });
    const expected = { submitted: 3, retries: 1, failed: 1, succeeded: 2 };
    let last = await counts();
    await waitFor(async () => {
      last = await counts();
      return JSON.stringify(last) === JSON.stringify(expected) || undefined;
    }, 20_000, 'the counts in Prometheus').catch(() => undefined);
    expect(last).toEqual(expected);

    // The panels draw them above 0: their series were at 0 before, so rate() sees the first one.
    const shows = (title: string, match: (s: PromSeries) => boolean) => waitFor(async () => {
      const series = await prom.query(promql(panel(title).expr));
      return series.some(match) ? series : undefined;
    }, 20_000, `the panel ${title} to show it`);
    const above0 = (s: PromSeries) => Number(s.value[1]) > 0;
    await shows('Failed runs / s', (s) => s.metric.agent === 'broken' && above0(s));
    await shows('Retries / s', (s) => s.metric.agent === 'flaky' && above0(s));

    // The HTTP errors panel shows the 401 by its route and status, and no longer its 0 line.
    // That series starts at 1, so rate() sees a second 401 only, once a scrape has the first.
    await shows('HTTP errors / s', (s) => s.metric.status === '401');
    expect((await call(api.url, 'GET', '/v1/scopes/acme/nothing-here')).status).toBe(401);
    const series = await shows('HTTP errors / s', (s) => s.metric.status === '401' && above0(s));
    console.log('HTTP errors panel:', JSON.stringify(series.map((s) => s.metric)));
    expect(series.map((s) => s.metric.status)).toEqual(['401']);
    await prom.stop();
  });
});

describe('dashboard, compose and Prometheus files', () => {
  it('the dashboard is well formed and uses only the provisioned datasource', () => {
    const uid = datasources.datasources[0].uid;
    expect(dashboard.uid).toBeTypeOf('string');
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    for (const p of panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      if (p.type === 'row') continue;
      expect(p.datasource?.uid, p.title).toBe(uid);
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets!) {
        expect(t.datasource?.uid, p.title).toBe(uid);
        expect(t.expr, p.title).toMatch(/\b(baton_|process_|nodejs_)/);
      }
    }
    for (const v of dashboard.templating.list) expect(v.datasource.uid).toBe(uid);
    const titles = panels.map((p) => p.title).join(' | ');
    for (const topic of ['Runs submitted', 'Run duration', 'Queue wait', 'Queue depth', 'Retries', 'Lease recoveries', 'SSE clients', 'Tokens / s', 'errors']) {
      expect(titles).toContain(topic);
    }
  });

  it('docker-compose.yml has every service, persistent Redis, scalable workers, and refers only to files that exist', () => {
    const s = compose.services;
    expect(Object.keys(s).sort()).toEqual(['api', 'grafana', 'jaeger', 'prometheus', 'redis', 'worker']);
    // The trace backend runs only with its profile, and the processes load no tracing SDK unless told to.
    expect(s.jaeger.profiles).toEqual(['tracing']);
    for (const svc of ['redis', 'api', 'worker', 'prometheus', 'grafana']) expect(s[svc].profiles, svc).toBeUndefined();
    expect(s.redis.command.join(' ')).toMatch(/--appendonly yes/);
    expect(s.redis.volumes.some((v: string) => v.endsWith(':/data'))).toBe(true);
    // --scale worker=N needs replicas that share no name and no host port.
    expect(s.worker.container_name).toBeUndefined();
    expect(s.worker.ports).toBeUndefined();
    expect(s.api.command).toEqual(['api']);
    expect(s.worker.command).toEqual(['worker']);
    for (const svc of ['api', 'worker']) {
      expect(existsSync(join(ROOT, s[svc].build, 'Dockerfile')), `${svc} build context`).toBe(true);
      expect(s[svc].environment.REDIS_URL).toBe('redis://redis:6379');
      expect(s[svc].environment.HOST).toBe('0.0.0.0');
      expect(s[svc].environment.OTEL_EXPORTER_OTLP_ENDPOINT).toBe('${OTEL_EXPORTER_OTLP_ENDPOINT:-}');
    }
    for (const [name, svc] of Object.entries<{ volumes?: string[] }>(s)) {
      for (const m of bindMounts(svc)) expect(existsSync(m.source), `${name}: ${m.source}`).toBe(true);
    }
    for (const name of Object.keys(compose.volumes)) {
      expect(Object.values<{ volumes?: string[] }>(s).some((svc) => svc.volumes?.some((v) => v.startsWith(`${name}:`)))).toBe(true);
    }

    // Grafana: provisioning and dashboards mounted where the provider and the home path look.
    const gMounts = bindMounts(s.grafana);
    const dashMount = gMounts.find((m) => m.source === join(ROOT, 'grafana/dashboards'))!;
    expect(providers.providers[0].options.path).toBe(dashMount.target);
    expect(gMounts.find((m) => m.source === join(ROOT, 'grafana/provisioning'))?.target).toBe('/etc/grafana/provisioning');
    const home = s.grafana.environment.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH as string;
    expect(existsSync(join(dashMount.source, posix.relative(dashMount.target, home)))).toBe(true);
    const ds = new URL(datasources.datasources[0].url);
    expect(s[ds.hostname]).toBeDefined();
    expect(ds.port).toBe('9090');

    // Prometheus: its config is the checked-in file and it scrapes the services on their ports.
    const pMount = bindMounts(s.prometheus).find((m) => m.target === '/etc/prometheus/prometheus.yml');
    expect(pMount?.source).toBe(join(ROOT, 'grafana/prometheus.yml'));
    const sd = Object.fromEntries(promConfig.scrape_configs.map((j: any) => [j.dns_sd_configs[0].names[0], j.dns_sd_configs[0].port]));
    expect(sd).toEqual({ api: Number(s.api.environment.PORT), worker: Number(s.worker.environment.METRICS_PORT) });
  });

  it.skipIf(noPrometheus)('promtool accepts grafana/prometheus.yml', () => {
    const r = spawnSync('promtool', ['check', 'config', join(ROOT, 'grafana/prometheus.yml')], { encoding: 'utf8' });
    if (r.error) throw new Error(`promtool not found: install Prometheus (apt-get install -y prometheus): ${r.error.message}`);
    expect(`${r.stdout}${r.stderr}`).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('the Dockerfile copies files that exist, and the image needs no dev dependency', () => {
    const dockerfile = read('Dockerfile');
    // Copies from the build stage (`--from=build`) are of its output, not of the checkout.
    for (const m of dockerfile.matchAll(/^COPY\s+(?!--from=)(.+)\s+\S+$/gm)) {
      for (const src of m[1].split(/\s+/)) expect(existsSync(join(ROOT, src)), src).toBe(true);
    }
    expect(dockerfile).toMatch(/RUN npm run build/);
    expect(dockerfile).toMatch(/COPY --from=build \/app\/dist \.\/dist/);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    expect(dockerfile).toMatch(/ENTRYPOINT \["node", "bin\/baton\.js"\]/);
    // `npm ci --omit=dev` leaves devDependencies out: every package the sources import must be a dependency.
    const pkg = JSON.parse(read('package.json'));
    const builtins = new Set(builtinModules);
    const imported = new Set<string>();
    // src/ui is bundled by Vite at build time (its packages end up in dist/ui), so it is left out.
    const runtimeSources = sourceFiles(join(ROOT, 'src')).filter((f) => !f.startsWith(join(ROOT, 'src/ui/')));
    for (const file of [...runtimeSources, join(ROOT, 'bin/baton.js')]) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/(?:from|import)\s*\(?\s*['"]([^'".][^'"]*)['"]/g)) {
        const spec = m[1];
        if (spec.startsWith('node:') || builtins.has(spec)) continue;
        imported.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);
      }
    }
    // tsx is optional (it loads TypeScript agent modules only; agents-loader.ts copes without it).
    const missing = [...imported].filter((p) => !(p in pkg.dependencies) && !(p in pkg.optionalDependencies));
    expect(missing, 'imported by src/ or bin/ but not in dependencies').toEqual([]);
  });
});

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sourceFiles(p) : /\.(ts|js|mjs)$/.test(p) ? [p] : [];
  });
}

/** Waits until Prometheus has scraped `n` targets successfully; returns their URLs. */
async function waitForTargets(get: <T>(path: string) => Promise<T>, n: number): Promise<string[]> {
  const until = Date.now() + 20_000;
  let last: { scrapeUrl: string; health: string; lastError: string }[] = [];
  while (Date.now() < until) {
    last = (await get<{ activeTargets: typeof last }>('/api/v1/targets')).activeTargets;
    if (last.length === n && last.every((t) => t.health === 'up')) return last.map((t) => t.scrapeUrl);
    await sleep(250);
  }
  throw new Error(`prometheus targets not up: ${JSON.stringify(last)}`);
}
