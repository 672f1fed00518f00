import { spawnSync } from 'node:child_process';

/** One sample of the Prometheus text format: `name{labels} value`. */
export interface Sample { name: string; labels: Record<string, string>; value: number }

/** Parses the exposition text into samples (comments skipped; label values unescaped). */
export function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    if (m[2]) {
      for (const l of m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
      }
    }
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** Sum of the samples of `name` whose labels include `match` (0 when none). */
export function total(samples: Sample[], name: string, match: Record<string, string> = {}): number {
  return select(samples, name, match).reduce((n, s) => n + s.value, 0);
}

export function select(samples: Sample[], name: string, match: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v));
}

/** Fetches and parses a /metrics endpoint. */
export async function scrape(url: string): Promise<{ text: string; samples: Sample[]; contentType: string }> {
  const res = await fetch(url);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${text.slice(0, 200)}`);
  return { text, samples: parseMetrics(text), contentType: res.headers.get('content-type') ?? '' };
}

/**
 * `promtool check metrics` on the text (Debian/Ubuntu: apt-get install -y prometheus).
 * Returns its exit code and what it printed; throws a clear message when promtool is missing.
 */
export function promtoolCheck(text: string): { status: number; output: string } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error && (r.error as NodeJS.ErrnoException).code === 'ENOENT') {
    throw new Error('promtool not found: install Prometheus (Debian/Ubuntu: apt-get install -y prometheus; .ci/run does this)');
  }
  return { status: r.status ?? -1, output: `${r.stdout}${r.stderr}` };
}
