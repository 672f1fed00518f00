import { readdirSync, readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { configSchema, loadConfig } from '../src/lib/config/index.ts';

/** docs/configuration.md's table names exactly the variables Baton reads. */
it('docs/configuration.md documents every configuration variable and no other', () => {
  const page = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
  const documented = new Set<string>();
  for (const line of page.split('\n').filter((l) => l.startsWith('| `'))) {
    const firstCell = line.split('|')[1];
    for (const m of firstCell.matchAll(/`([A-Z][A-Z0-9_]+)`/g)) documented.add(m[1]);
  }
  expect([...documented].sort()).toEqual(Object.keys(configSchema.shape).sort());
});

/**
 * A default's figure quoted in a page beside its variable's name (`NAME` (64), `NAME` (default
 * 30 s), `A` / `B` (20/s, 100), a table cell ending (`NAME`) whose next cell starts with the
 * figure), and each default in docs/configuration.md's table, is the code's default: a changed
 * default cannot leave a page behind (docs/streams.md said 64 and 512 open streams while the
 * defaults were 2,000 and 4,000).
 */
it('every default a page quotes beside its variable\'s name is the code\'s default', () => {
  const defaults = loadConfig({}) as unknown as Record<string, unknown>;
  const pages = [...readdirSync(new URL('../docs/', import.meta.url)).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`), 'README.md', 'ARCHITECTURE.md'];
  const quoted: { where: string; name: string; figure: string; value: unknown }[] = [];
  const quote = (where: string, names: string[], figures: string[]) => {
    const known = names.filter((n) => n in defaults);
    if (known.length === 0) return;
    // One name: the figure leads, then an end or a comma, colon or semicolon. Several: one whole figure each.
    const found = names.length === 1 ? [leadingFigure(figures[0])] : figures.length === names.length ? figures.map(wholeFigure) : [];
    found.forEach((figure, i) => {
      if (figure && names[i] in defaults) quoted.push({ where: `${where.replace(/\s+/g, ' ').slice(0, 160)}`, name: names[i], figure, value: figureValue(names[i], figure) });
    });
  };
  for (const page of pages) {
    const text = readFileSync(new URL(`../${page}`, import.meta.url), 'utf8');
    for (const m of text.matchAll(/((?:`[A-Z][A-Z0-9_]+`\s*\/\s*)*`[A-Z][A-Z0-9_]+`)\s*\(([^)]*)\)/g)) {
      const names = [...m[1].matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((n) => n[1]);
      quote(`${page}: ${m[0]}`, names, names.length === 1 ? [m[2]] : m[2].split(/, /));
    }
    for (const line of text.split('\n').filter((l) => l.startsWith('|'))) {
      const cells = line.split('|');
      cells.forEach((cell, i) => {
        if (i + 1 >= cells.length || !/\(`[A-Z][A-Z0-9_]+`\)\s*$/.test(cell)) return;
        const names = [...cell.matchAll(/\(`([A-Z][A-Z0-9_]+)`\)/g)].map((n) => n[1]);
        const head = cells[i + 1].split(':')[0];
        quote(`${page}: ${names.join(', ')} | ${head}`, names, names.length === 1 ? [head] : head.split(/, /));
      });
    }
  }
  // docs/configuration.md: | `A` / `B` | `1` / `2` | ...: each variable's default cell.
  const page = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
  for (const line of page.split('\n').filter((l) => l.startsWith('| `'))) {
    const [names, values] = line.split('|').slice(1, 3).map((cell) => cell.trim().split(' / '));
    if (names.length !== values.length) continue;
    names.forEach((n, i) => {
      const name = /^`([A-Z][A-Z0-9_]+)`$/.exec(n)?.[1];
      const value = /^`([^`]+)`$/.exec(values[i])?.[1];
      // A default given as an expression of another variable (`LEASE_MS / 4`) is left to the prose.
      if (!name || value === undefined || !(name in defaults) || /[A-Z]{2,}/.test(value)) return;
      const parsed = /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value === 'true' || value === 'false' ? value === 'true' : value;
      quoted.push({ where: `docs/configuration.md: ${name} | ${values[i]}`, name, figure: value, value: parsed });
    });
  }
  // The stream caps, at least, are among them, from each page that gives them.
  expect(quoted.filter((q) => q.name === 'SSE_MAX_PER_KEY').map((q) => q.where.split(':')[0]))
    .toEqual(expect.arrayContaining(['docs/configuration.md', 'docs/streams.md', 'docs/tenancy.md']));
  const wrong = quoted.filter((q) => q.value !== defaults[q.name])
    .map((q) => `${q.where}: says ${q.figure}, the code's default is ${JSON.stringify(defaults[q.name])}`);
  expect(wrong).toEqual([]);
  // A change that stopped the scan from finding them would pass with none.
  expect(quoted.length).toBeGreaterThan(100);
});

const FIGURE = String.raw`[0-9][0-9,]*(?:\.[0-9]+)?(?:\s*[A-Za-z]+)?(?:\/s)?`;

/** `64`, `default 30 s`, `4,096 by default`: the figure, when the text is one. */
function wholeFigure(text: string): string | undefined {
  return new RegExp(`^(?:default\\s+)?\`?(${FIGURE})\`?(?:\\s+by default)?$`).exec(text.replace(/\s+/g, ' ').trim())?.[1];
}

/** The figure a text starts with, when an end, a comma and a space, a colon or a semicolon follows it. */
function leadingFigure(text: string): string | undefined {
  const t = text.replace(/\s+/g, ' ').trim();
  return wholeFigure(/^.*?(?=, |[;:]|$)/.exec(t)![0]);
}

const TIME: Record<string, number> = {
  ms: 1, s: 1_000, second: 1_000, seconds: 1_000, min: 60_000, minute: 60_000, minutes: 60_000,
  h: 3_600_000, hour: 3_600_000, hours: 3_600_000, d: 86_400_000, day: 86_400_000, days: 86_400_000,
};
const SIZE: Record<string, number> = { B: 1, bytes: 1, KiB: 1_024, MiB: 1_048_576, GiB: 1_073_741_824 };

/** A figure's value in its variable's unit (milliseconds for `_MS`, bytes for `BYTES`), or why it has none. */
function figureValue(name: string, figure: string): number | string {
  const m = /^([0-9][0-9,]*(?:\.[0-9]+)?)\s*([A-Za-z]+)?(?:\/s)?$/.exec(figure)!;
  const n = Number(m[1].replaceAll(',', ''));
  const unit = m[2];
  if (unit === undefined) return n;
  if (unit in TIME && name.endsWith('_MS')) return n * TIME[unit];
  if (unit in SIZE && name.includes('BYTES')) return n * SIZE[unit];
  return `a figure in ${unit}, not ${name}'s unit`;
}
