// Keeps ARCHITECTURE.md true and short, checked by `npm test` (npm run check:architecture):
// - the page is at most 400 lines (longer explanations live beside their code or in docs/);
// - every hop of its hop lists names a function, method or const that exists in the file the
//   hop names, so a rename or a move fails the suite until the page follows it;
// - each hop is called in the text of the hop just before it (its name before a `(`), a script
//   by its name as a string in a hop before it (the unit hands it to ScriptCaller.call), so a
//   list follows the path the code takes and leaves none of it out; a function handed as a
//   callback follows the hop whose text hands it (the wrapper that runs it is no hop);
// - the flows submit, claim, step, finish, recovery and cancel each have a hop list;
// - every relative link of the page opens a file, and its #anchor a heading of that file;
//   every path it names in code (`src/…`, `test/…`, `scripts/…`, `docs/…`, `bench/…`), such as
//   the test that proves an invariant, exists; a count it gives a flow ("**submit** (8 hops")
//   is the count of its list; a `Class.member` it names in its prose, where a class of that
//   name is declared in src/, is a member of that class;
// - a flow with a budget (submit, finish, recovery: 6 hops) within it: the count and the
//   budget are printed, and an overrun fails.
//
// A hop list is a fenced block whose info string is `hops <flow>`, one hop per line:
//
//   ```hops submit
//   runRoutes           src/api/routes-runs.ts          POST /v1/scopes/{scope}/runs
//   Submissions.submit  src/lib/engine/submissions.ts   the checks, then the run made
//   ```
//
// The name first, the path second (from the repository's root), then any note. A name is
// `fn`, `CONST` or `Class.member` (private members too) declared at the top of a TypeScript
// or JavaScript file; in a .lua file, the file's own name is the script (the Function
// library's function for it) and any other name a `local function` of the file.
//
// Usage: node scripts/check-architecture.mjs [page]   (default page: ARCHITECTURE.md)
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import ts from 'typescript';

const MAX_LINES = 400;
const FLOWS = ['submit', 'claim', 'step', 'finish', 'recovery', 'cancel'];
const BUDGET = { submit: 6, finish: 6, recovery: 6 };

const args = process.argv.slice(2);
const page = args.find((a) => !a.startsWith('--')) ?? 'ARCHITECTURE.md';
const text = readFileSync(page, 'utf8');
const lines = text.replace(/\n$/, '').split('\n');
const problems = [];

if (lines.length > MAX_LINES) problems.push(`${page} has ${lines.length} lines, more than ${MAX_LINES}: move explanations next to their code or into docs/`);

/** The hop lists: flow → hops, each with the line it is on. */
const flows = new Map();
let open; // the flow of the block being read, or null in another fenced block
lines.forEach((line, i) => {
  const fence = /^\s*```\s*(.*)$/.exec(line);
  if (fence) {
    if (open !== undefined) { open = undefined; return; }
    const m = /^hops\s+([a-z][a-z-]*)\s*$/.exec(fence[1]);
    open = m ? m[1] : null;
    if (m) {
      if (flows.has(m[1])) problems.push(`${page}:${i + 1}: a second hop list for ${m[1]}`);
      flows.set(m[1], []);
    }
    return;
  }
  if (!open || line.trim() === '') return;
  const hop = /^\s*([A-Za-z_$][\w$]*(?:\.[A-Za-z_$#][\w$]*)?)\s+(src\/\S+)(?:\s+(.*))?$/.exec(line);
  if (!hop) {
    problems.push(`${page}:${i + 1}: a hop is "name  path  note" (name fn, CONST or Class.member; path under src/): ${line.trim()}`);
    return;
  }
  flows.get(open).push({ name: hop[1], path: hop[2], line: i + 1 });
});
if (open !== undefined) problems.push(`${page}: a fenced block is not closed`);

for (const flow of FLOWS) if (!flows.get(flow)?.length) problems.push(`${page}: no hop list for ${flow} (a \`\`\`hops ${flow} block)`);

/** The names a file declares at its top, each with its text (what it calls), by file. */
const declared = new Map();
function namesOf(path) {
  if (declared.has(path)) return declared.get(path);
  const names = new Map();
  const add = (name, body) => names.set(name, `${names.get(name) ?? ''}${body}\n`);
  const source = readFileSync(path, 'utf8');
  if (path.endsWith('.lua')) {
    add(basename(path, '.lua'), source);
    // A helper's text runs to the next function at the start of a line.
    const starts = [...source.matchAll(/^(?:local\s+)?function\s+([A-Za-z_]\w*)\s*\(|^local\s+([A-Za-z_]\w*)\s*=\s*function\b/gm)];
    starts.forEach((m, i) => add(m[1] ?? m[2], source.slice(m.index + m[0].length, starts[i + 1]?.index ?? source.length)));
  } else {
    const kind = /\.tsx$/.test(path) ? ts.ScriptKind.TSX : /\.m?js$/.test(path) ? ts.ScriptKind.JS : ts.ScriptKind.TS;
    const src = ts.createSourceFile(path, source, ts.ScriptTarget.Latest, true, kind);
    const bindings = (name) => (ts.isIdentifier(name) ? [name.text]
      : name.elements.flatMap((e) => (ts.isOmittedExpression(e) ? [] : bindings(e.name))));
    // A declaration's text without its own name: what it calls.
    const inner = (n) => (n.body ?? n.initializer)?.getText(src) ?? '';
    for (const s of src.statements) {
      if ((ts.isFunctionDeclaration(s) || ts.isEnumDeclaration(s)) && s.name) add(s.name.text, ts.isEnumDeclaration(s) ? '' : inner(s));
      if (ts.isVariableStatement(s)) for (const d of s.declarationList.declarations) for (const n of bindings(d.name)) add(n, inner(d));
      if (ts.isClassDeclaration(s) && s.name) {
        add(s.name.text, '');
        for (const m of s.members) {
          if (m.name && (ts.isIdentifier(m.name) || ts.isPrivateIdentifier(m.name) || ts.isStringLiteral(m.name))) {
            add(`${s.name.text}.${m.name.text}`, inner(m));
          }
        }
      }
    }
  }
  declared.set(path, names);
  return names;
}

/**
 * How a hop is called: a script by its name as a string (`this.call('finish', ...)`), anything
 * else by its own name before a `(` (`.finish(`, `closeAttempt(`).
 */
const isScript = ({ name, path }) => path.endsWith('.lua') && name === basename(path, '.lua');
const callOf = (hop) => (isScript(hop)
  ? new RegExp(`['"]${hop.name}['"]`)
  : new RegExp(`(?<![\\w$])${hop.name.split('.').pop().replace('$', '\\$')}\\s*\\(`));

for (const [flow, hops] of flows) {
  hops.forEach((hop, k) => {
    const { name, path, line } = hop;
    if (!existsSync(path) || !statSync(path).isFile()) {
      problems.push(`${page}:${line}: ${flow}: ${path} does not exist (hop ${name})`);
      hop.body = '';
    } else if (!namesOf(path).has(name)) {
      problems.push(`${page}:${line}: ${flow}: ${path} declares no ${name}`);
      hop.body = '';
    } else {
      hop.body = namesOf(path).get(name);
      // In order: the hop before calls it; a script is named by a hop before (its unit).
      const callers = isScript(hop) ? hops.slice(0, k) : hops.slice(k - 1, k);
      if (k > 0 && !callers.some((h) => callOf(hop).test(h.body))) {
        problems.push(`${page}:${line}: ${flow}: ${isScript(hop) ? 'no hop before' : `${hops[k - 1].name} does not call`} ${name}`);
      }
    }
  });
}

const counts = [...flows].map(([flow, hops]) => {
  const budget = BUDGET[flow];
  const over = budget !== undefined && hops.length > budget;
  if (over) problems.push(`${page}: ${flow} has ${hops.length} hops, over its budget of ${budget}`);
  return `${flow} ${hops.length}${budget === undefined ? '' : ` (budget ${budget}${over ? ', over' : ''})`}`;
});

// Relative links: the file exists and the anchor names one of its headings (as GitHub slugs it).
const slug = (heading) => heading.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/<[^>]+>/g, '').replace(/[`*]/g, '')
  .trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
function anchorsOf(file) {
  const seen = new Map();
  const anchors = new Set();
  let fenced = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const m = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}
let fencedText = false;
lines.forEach((raw, i) => {
  if (/^\s*(```|~~~)/.test(raw)) fencedText = !fencedText;
  if (fencedText) return;
  for (const m of raw.replace(/`[^`]*`/g, '').matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const target = m[1];
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
    const [path, anchor] = target.split('#', 2);
    const file = path === '' ? resolve(page) : resolve(dirname(page), decodeURIComponent(path));
    if (!existsSync(file)) problems.push(`${page}:${i + 1}: the link ${target} opens nothing`);
    else if (anchor !== undefined && (!file.endsWith('.md') || !anchorsOf(file).has(anchor))) {
      problems.push(`${page}:${i + 1}: the link ${target} names no heading of ${path || page}`);
    }
  }
});

// Paths named in code spans exist (the tests that prove the invariants among them).
lines.forEach((raw, i) => {
  if (/^\s*```/.test(raw)) return;
  for (const m of raw.matchAll(/`((?:src|test|scripts|docs|bench)\/[\w./-]*)`/g)) {
    if (!existsSync(m[1])) problems.push(`${page}:${i + 1}: ${m[1]} does not exist`);
  }
  for (const m of raw.matchAll(/\*\*([a-z][a-z-]*)\*\* \((\d+) hops/g)) {
    const hops = flows.get(m[1]);
    if (hops && hops.length !== Number(m[2])) problems.push(`${page}:${i + 1}: ${m[1]} is said to take ${m[2]} hops; its list has ${hops.length}`);
  }
});

// `Class.member` in the prose: the member exists when src/ declares the class (ctx.step or
// Date.now are not ours to check).
const sources = (dir) => readdirSync(dir).sort().flatMap((f) => {
  const p = join(dir, f);
  return statSync(p).isDirectory() ? sources(p) : /\.tsx?$/.test(p) ? [p] : [];
});
const classes = new Map();
for (const file of existsSync('src') ? sources('src') : []) {
  for (const m of readFileSync(file, 'utf8').matchAll(/^(?:export\s+)?(?:abstract\s+)?class\s+([A-Z]\w*)/gm)) {
    classes.set(m[1], [...(classes.get(m[1]) ?? []), file]);
  }
}
lines.forEach((raw, i) => {
  if (/^\s*```/.test(raw)) return;
  for (const m of raw.matchAll(/`([A-Z]\w*)\.(#?[A-Za-z_]\w*)(?:\(\))?`/g)) {
    const files = classes.get(m[1]);
    if (files && !files.some((f) => namesOf(f).has(`${m[1]}.${m[2]}`))) {
      problems.push(`${page}:${i + 1}: ${m[1]} (${files.join(', ')}) has no member ${m[2]}`);
    }
  }
});

const summary = `check-architecture: ${page}, ${lines.length} lines; hops: ${counts.join(', ')}`;
if (problems.length) {
  console.error(`${summary}\ncheck-architecture: ${problems.length} problem(s)\n${problems.map((p) => `  ${p}`).join('\n')}`);
  process.exit(1);
}
console.log(summary);
