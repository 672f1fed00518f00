import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { track } from './resources.ts';
import { sleep } from './harness.ts';

export interface PromSeries { metric: Record<string, string>; value: [number, string] }

export interface RunningPrometheus {
  url: string;
  /** Instant query; returns the result vector (throws on a query error, with Prometheus's message). */
  query(expr: string): Promise<PromSeries[]>;
  get<T = any>(path: string): Promise<T>;
  output(): string;
  stop(): Promise<void>;
}

const INSTALL = 'install Prometheus (Debian/Ubuntu: apt-get install -y prometheus; .ci/run does this)';

/** Fails with the install hint when the Debian `prometheus` binary is missing. */
export function requirePrometheus(): void {
  const r = spawnSync('prometheus', ['--version'], { encoding: 'utf8' });
  if (r.error) throw new Error(`the prometheus binary is needed for this test: ${INSTALL} (${r.error.message})`);
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A real Prometheus on a free port, scraping `jobs` (job name -> host:port targets) every
 * second, with its data in a temporary directory removed on stop. Registered with the
 * harness so the test's leak check sees it stopped.
 */
export async function startPrometheus(jobs: Record<string, string[]>): Promise<RunningPrometheus> {
  requirePrometheus();
  const dir = mkdtempSync(join(tmpdir(), 'baton-prometheus-'));
  const lines = ['global:', '  scrape_interval: 1s', '  scrape_timeout: 1s', 'scrape_configs:'];
  for (const [job, targets] of Object.entries(jobs)) {
    lines.push(`  - job_name: ${job}`, '    static_configs:', `      - targets: [${targets.map((t) => JSON.stringify(t)).join(', ')}]`);
  }
  writeFileSync(join(dir, 'prometheus.yml'), `${lines.join('\n')}\n`);
  const port = await freePort();
  const child = spawn('prometheus', [
    `--config.file=${join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`,
    '--log.level=warn',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (b) => { out += b; });
  child.stderr!.on('data', (b) => { out += b; });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const killLater = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(killLater);
      rmSync(dir, { recursive: true, force: true });
    })();
    return stopping;
  };
  track(child, stop);

  const url = `http://127.0.0.1:${port}`;
  const get = async <T>(path: string): Promise<T> => {
    const res = await fetch(url + path);
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${path}: ${body.error ?? res.status}`);
    return body.data;
  };
  const until = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}:\n${out}`);
    const ok = await fetch(`${url}/-/ready`).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > until) throw new Error(`prometheus not ready after 30 s:\n${out}`);
    await sleep(200);
  }
  return {
    url,
    get,
    output: () => out,
    async query(expr) {
      const data = await get<{ resultType: string; result: PromSeries[] }>(`/api/v1/query?query=${encodeURIComponent(expr)}`);
      return data.resultType === 'vector' ? data.result : [];
    },
    stop,
  };
}
