import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * README.md is the front door and docs/ holds the guides: every relative link between them
 * (and to the other files they point at) must open something, every #anchor must name a
 * heading of its page as GitHub renders it, and what they link to must ship in the package,
 * so the links work on GitHub and in an installed copy alike.
 */

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const README_MAX_LINES = 400;

const PAGES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/**
 * The lines of a Markdown file with those of fenced code blocks blanked (a `# comment` in a sh
 * block is no heading, a `](x)` in code no link), so indexes stay line numbers.
 */
function proseLines(text: string): string[] {
  let fence: string | undefined;
  return text.split('\n').map((line) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (m) {
      if (fence === undefined) fence = m[1][0];
      else if (m[1][0] === fence) fence = undefined;
      return '';
    }
    return fence === undefined ? line : '';
  });
}

/**
 * GitHub's anchor for a heading (github-slugger): the rendered text, lower-cased, with every
 * character but letters, digits, marks, `_`, `-` and spaces dropped, spaces turned into `-`;
 * a repeated heading gets `-1`, `-2`, ...
 */
function slug(heading: string): string {
  const rendered = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/<[^>]+>/g, '') // inline HTML
    .replace(/[`*]/g, ''); // code spans and emphasis: their content
  return rendered.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of proseLines(readFileSync(file, 'utf8'))) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

interface Link { page: string; line: number; target: string }

function linksOf(page: string): Link[] {
  const links: Link[] = [];
  proseLines(readFileSync(join(ROOT, page), 'utf8')).forEach((raw, i) => {
    const line = raw.replace(/`[^`]*`/g, ''); // a link inside a code span is text
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) links.push({ page, line: i + 1, target: m[1] });
  });
  return links;
}

/** Why a link does not resolve, or undefined when it does. */
function problem(link: Link, files: string[]): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.target)) return undefined; // https:, mailto: ...: not ours to check
  const [path, anchor] = link.target.split('#', 2);
  const file = path === '' ? join(ROOT, link.page) : resolve(dirname(join(ROOT, link.page)), decodeURIComponent(path));
  if (!existsSync(file)) return `${path} does not exist`;
  const inRepo = relative(ROOT, file);
  if (inRepo.startsWith('..')) return `${path} is outside the repository`;
  const shipped = files.some((f) => (f.endsWith('/') ? `${inRepo}/`.startsWith(f) : inRepo === f || inRepo.startsWith(`${f}/`)));
  if (!shipped) return `${inRepo} is not in package.json "files", so the link breaks in the package`;
  if (anchor === undefined) return undefined;
  if (!file.endsWith('.md') || statSync(file).isDirectory()) return `#${anchor} points into ${inRepo}, which has no headings`;
  if (!anchorsOf(file).has(anchor)) return `${inRepo} has no heading whose anchor is #${anchor}`;
  return undefined;
}

describe('README.md and docs/', () => {
  it('slugs headings as GitHub does', () => {
    expect(slug('The AI SDK, made durable (`baton-agents/ai`)')).toBe('the-ai-sdk-made-durable-baton-agentsai');
    expect(slug('1. A folder for your agents, and Baton running')).toBe('1-a-folder-for-your-agents-and-baton-running');
    expect(slug('Runtimes: stats and drain')).toBe('runtimes-stats-and-drain');
    expect(slug('`METRICS_PORT` and [the API](x.md)')).toBe('metrics_port-and-the-api');
  });

  it('README.md is at most 400 lines', () => {
    const lines = readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/\n$/, '').split('\n').length;
    expect(lines).toBeLessThanOrEqual(README_MAX_LINES);
  });

  it('every relative link and anchor resolves, to a file the package ships', () => {
    const files: string[] = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).files;
    const links = PAGES.flatMap(linksOf);
    // A parser that found nothing would pass anything: the pages link to each other many times.
    expect(links.filter((l) => !/^[a-z][a-z0-9+.-]*:/i.test(l.target)).length).toBeGreaterThan(30);
    const broken = links.flatMap((l) => {
      const why = problem(l, files);
      return why ? [`${l.page}:${l.line} (${l.target}): ${why}`] : [];
    });
    expect(broken).toEqual([]);
  });
});
