// Checks the transitions library (src/lib/engine/lua), run by `npm test` (npm run check:lua):
//
// 1. luacheck over the library as Redis loads it (librarySource() of src/lib/engine/scripts.ts,
//    settings in .luacheckrc): every name a script uses is a local of the library or a global
//    Redis provides, so a misspelled helper fails here instead of as a call to nil at run time.
//    Its findings are reported at the line of the .lua file they come from.
// 2. No positional record reads. A record's fields are read by name: readFields() (core.lua)
//    is the only HMGET of the library and hands back a table keyed by field name, and fenced()
//    returns one. The rule, precisely: `'HMGET'` appears nowhere but in readFields, and a
//    variable that holds what readFields() or fenced() returned is never indexed by a number
//    (`rec[2]`). (Other replies, a TIME's or a ZRANGE's, are lists, not records.)
// 3. Each transition's header says which helpers it uses: a line `-- @uses a, b, c` (several
//    may follow one another) naming exactly the helpers of core.lua and lib.lua (their
//    top-level local functions and constants) that its body names, no more, no fewer.
import { spawnSync } from 'node:child_process';
import { librarySource, luaSources } from '../src/lib/engine/scripts.ts';
import { PROGRAMS, skipWithout } from '../test/helpers/programs.ts';

const problems = [];
const { core, lib, bodies } = luaSources();

// ---- 1. luacheck over the assembled library ----
// The library's text in order, with the file each line comes from (see built() in scripts.ts:
// `#!lua name=...`, core, lib, then per body a two-line opening, the body, and `end)`).
const origin = [['(library)', 1]];
const add = (file, text) => text.split('\n').forEach((_, i) => origin.push([file, i + 1]));
add('core.lua', core);
add('lib.lua', lib);
for (const [name, body] of bodies) {
  origin.push([`${name}.lua (its function's opening)`, 0], [`${name}.lua (its function's opening)`, 0]);
  add(`${name}.lua`, body);
  origin.push([`${name}.lua (its function's end)`, 0]);
}
// Without luacheck (a developer's machine that lacks it) this part is skipped, by name, and the
// other two still run; with CI=true skipWithout throws, naming the install command.
let skipped = false;
try {
  skipped = skipWithout('luacheck');
} catch (err) {
  problems.push(err.message);
}
const check = skipped || problems.length ? undefined : spawnSync('luacheck', ['--config', '.luacheckrc', '--formatter', 'plain', '--codes', '-'], {
  input: librarySource(), encoding: 'utf8',
});
if (check?.error) {
  problems.push(`luacheck could not run (${check.error.message}); install it: ${PROGRAMS.luacheck.install}`);
} else if (check) {
  for (const line of check.stdout.split('\n').filter(Boolean)) {
    const m = /^stdin:(\d+):(\d+): (.*)$/.exec(line);
    if (!m) { problems.push(`luacheck: ${line}`); continue; }
    const [file, at] = origin[Number(m[1]) - 1] ?? ['(library)', Number(m[1])];
    problems.push(`src/lib/engine/lua/${file}${at ? `:${at}` : ''}:${m[2]}: ${m[3]}`);
  }
  if (check.status !== 0 && !check.stdout.trim()) problems.push(`luacheck failed: ${check.stderr.trim()}`);
}

// ---- 2. no positional record reads ----
/** The text without comments and string literals (kept as empty quotes), lines kept in place. */
function code(text) {
  return text
    .replace(/--\[\[[\s\S]*?\]\]/g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|--[^\n]*/g, (t) => (t.startsWith('--') ? '' : t[0] + t[0]));
}
const files = [['core.lua', core], ['lib.lua', lib], ...bodies.map(([name, body]) => [`${name}.lua`, body])];
for (const [file, text] of files) {
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (!line.includes("'HMGET'")) return;
    // readFields is the one place: its HMGET is the line after its definition.
    if (file === 'core.lua' && /^local function readFields\(/.test(lines[i - 1] ?? '')) return;
    problems.push(`src/lib/engine/lua/${file}:${i + 1}: HMGET outside readFields (core.lua): read a record's fields by name`);
  });
  const plain = code(text);
  const holders = new Set();
  for (const m of plain.matchAll(/local\s+([\w\s,]+?)\s*=\s*(readFields|fenced)\s*\(/g)) {
    const names = m[1].split(',').map((n) => n.trim());
    holders.add(names[m[2] === 'fenced' ? 1 : 0]);
  }
  for (const m of plain.matchAll(/\b(\w+)\s*=\s*\w+\s+or\s+readFields\s*\(/g)) holders.add(m[1]);
  plain.split('\n').forEach((line, i) => {
    for (const m of line.matchAll(/(?<![.:\w])(\w+)\s*\[\s*\d+\s*\]/g)) {
      if (holders.has(m[1])) problems.push(`src/lib/engine/lua/${file}:${i + 1}: ${m[0]} reads a record by position: use its field's name`);
    }
  });
}

// ---- 3. each transition names the helpers it uses ----
const helpers = new Set();
for (const text of [core, lib]) {
  for (const m of text.matchAll(/^local function (\w+)/gm)) helpers.add(m[1]);
  for (const m of text.matchAll(/^local ([A-Z][A-Z0-9_]*) =/gm)) helpers.add(m[1]);
}
for (const [name, body] of bodies) {
  const listed = new Set();
  for (const m of body.matchAll(/^-- @uses (.*)$/gm)) for (const h of m[1].split(',')) if (h.trim()) listed.add(h.trim());
  const used = new Set();
  for (const m of code(body).matchAll(/(?<![.:\w])([A-Za-z_]\w*)/g)) if (helpers.has(m[1])) used.add(m[1]);
  const file = `src/lib/engine/lua/${name}.lua`;
  const missing = [...used].filter((h) => !listed.has(h));
  const extra = [...listed].filter((h) => !used.has(h));
  if (missing.length) problems.push(`${file}: uses ${missing.join(', ')}, which its \`-- @uses\` header does not list`);
  for (const h of extra) {
    problems.push(`${file}: its \`-- @uses\` header lists ${h}, ${helpers.has(h) ? 'which it does not use' : 'which is no helper of core.lua or lib.lua'}`);
  }
}

if (problems.length) {
  console.error(`check-lua: ${problems.length} problem(s) in the transitions library:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
if (skipped) {
  console.log(`check-lua: SKIPPED luacheck, which is not installed (${PROGRAMS.luacheck.install}); ` +
    `${bodies.length} transitions read records by name and list the helpers they use`);
} else {
  console.log(`check-lua: ${bodies.length} transitions and their helpers pass luacheck, read records by name and list the helpers they use`);
}
