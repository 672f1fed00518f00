// Checks the transitions library (the .lua files of src/lib/transitions), run by `npm test` (npm run check:lua):
//
// 1. luacheck over the library as Redis loads it (librarySource() of src/lib/transitions/scripts.ts,
//    settings in .luacheckrc): every name a script uses is a local of the library or a global
//    Redis provides, so a misspelled helper fails here instead of as a call to nil at run time.
//    Its findings are reported at the line of the .lua file they come from.
// 2. No positional record reads. A record's fields are read by name: readFields() (lib/records.lua)
//    is the only HMGET of the library and hands back a table keyed by field name, and fenced()
//    returns one. The rule, precisely: `'HMGET'` appears nowhere but in readFields, and a
//    variable that holds what readFields() or fenced() returned is never indexed by a number
//    (`rec[2]`). (Other replies, a TIME's or a ZRANGE's, are lists, not records.)
// 3. Each transition, and each helper file of lua/lib/, says which helpers it uses: lines
//    `-- @uses a, b, c` naming exactly the helpers (top-level local functions and constants) of
//    the helper files that its code names (for a helper file: of the files before it), no more,
//    no fewer.
// 4. Codes by name: no reply list starts with a bare number (`return { -1`, `return {0,`): a
//    code is `CODE.<name>` or `OUTCOME.<script>.<name>` (generated from script-codes.ts), and a
//    script names only its own outcomes.
// 5. Each transition's header declares its replies, one `-- @reply` line per outcome:
//    `-- @reply Claimed: fence, attempt, ...`, `-- @reply NotFound` (names: its Outcome or
//    ScriptCode keys), or `-- @reply: a, b` for a reply without a code (a long list goes on in
//    indented comment lines after it: `--   field, ...`); and they are exactly the
//    decoder's declared lists (the `REPLY` of its unit, <name>.ts beside <name>.lua: unitReplies()): the same outcomes, the same fields
//    in the same order. Each code a script returns by name is one its header declares.
// 6. No .lua file passes 200 lines, and no helper takes more than four parameters (more go in
//    one table of named fields: `finishRun({ runId = ..., status = ..., ... })`).
//
// Run as a program it checks the library on disk; checkLibrary() (test/check-lua.test.ts)
// checks given sources.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { assembleLibrary, luaSources } from '../src/lib/transitions/scripts.ts';
import { Outcome, ScriptCode, outcomeGroup } from '../src/lib/transitions/script-codes.ts';
import { PROGRAMS, skipWithout } from '../test/helpers/programs.ts';

/**
 * Each transition's declared replies, by name: the `REPLY` its unit exports, the TypeScript file
 * beside its script (src/lib/transitions/<name>.ts next to <name>.lua). A script without
 * such a unit is left out here, and checkLibrary() names it.
 */
export async function unitReplies(names) {
  const replies = {};
  for (const name of names) {
    const unit = new URL(`../src/lib/transitions/${name}.ts`, import.meta.url);
    if (!existsSync(unit)) continue;
    const { REPLY } = await import(unit.href);
    if (REPLY) replies[name] = REPLY;
  }
  return replies;
}

/** The most lines a .lua file holds. */
const MAX_LINES = 200;

/** The text without comments and string literals (kept as empty quotes), lines kept in place. */
function code(text) {
  return text
    .replace(/--\[\[[\s\S]*?\]\]/g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|--[^\n]*/g, (t) => (t.startsWith('--') ? '' : t[0] + t[0]));
}

/** The helper names `text` defines at its top level. */
function defined(text) {
  const names = new Set();
  for (const m of text.matchAll(/^local function (\w+)/gm)) names.add(m[1]);
  for (const m of text.matchAll(/^local ([A-Z][A-Z0-9_]*) =/gm)) names.add(m[1]);
  // `call` (lib/call.lua), the call's state, and begin() are every file's: not listed.
  return names;
}

/** A `-- @uses` declaration against what the code names of `helpers`: the problems. */
function usesProblems(file, text, helpers, where) {
  const listed = new Set();
  for (const m of text.matchAll(/^-- @uses (.*)$/gm)) for (const h of m[1].split(',')) if (h.trim()) listed.add(h.trim());
  const used = new Set();
  for (const m of code(text).matchAll(/(?<![.:\w])([A-Za-z_]\w*)/g)) if (helpers.has(m[1])) used.add(m[1]);
  const problems = [];
  const missing = [...used].filter((h) => !listed.has(h));
  if (missing.length) problems.push(`${file}: uses ${missing.join(', ')}, which its \`-- @uses\` lines do not list`);
  for (const h of [...listed].filter((n) => !used.has(n))) {
    problems.push(`${file}: its \`-- @uses\` lines list ${h}, ${helpers.has(h) ? 'which it does not use' : `which is no helper of ${where}`}`);
  }
  return problems;
}

/** A transition's `-- @reply` lines: outcome name ('' for a reply without a code) -> its field names. */
export function replyHeader(body) {
  const declared = new Map();
  let last;
  for (const line of body.split('\n')) {
    const m = /^-- @reply(?: (\w+))?(?::\s*(.*))?$/.exec(line);
    // A long list goes on in the lines after, indented: `--   field, field`.
    const more = last && /^--\s{2,}(\w[\w\s,]*)$/.exec(line);
    if (m) {
      last = m[1] ?? '';
      declared.set(last, (m[2] ?? '').split(',').map((f) => f.trim()).filter(Boolean));
    } else if (more) {
      declared.get(last).push(...more[1].split(',').map((f) => f.trim()).filter(Boolean));
    } else {
      last = undefined;
    }
  }
  return declared;
}

/**
 * The problems of a library made of `sources` (luaSources()'s shape), its replies held against
 * `replies` (unitReplies()'s shape: script name -> its unit's REPLY); `luacheck` false skips part 1.
 */
export function checkLibrary(sources, replies, { luacheck = true } = {}) {
  const problems = [];
  const { codes, helpers, bodies } = sources;
  const path = (file) => `src/lib/transitions/${file}`;

  // ---- 1. luacheck over the assembled library ----
  if (luacheck) {
    // The library's text in order, with the file each line comes from (see built() in scripts.ts:
    // `#!lua name=...`, the codes, the helper files, then per body a three-line opening, the body
    // and two closing lines).
    const origin = [['(library)', 1]];
    const add = (file, text) => text.split('\n').forEach((_, i) => origin.push([file, i + 1]));
    add('(generated codes: luaCodes in script-codes.ts)', codes);
    for (const [name, text] of helpers) add(`lib/${name}.lua`, text);
    for (const [name, body] of bodies) {
      for (let i = 0; i < 3; i++) origin.push([`${name}.lua (its function's opening)`, 0]);
      add(`${name}.lua`, body);
      for (let i = 0; i < 2; i++) origin.push([`${name}.lua (its function's end)`, 0]);
    }
    let skipped = false;
    try {
      skipped = skipWithout('luacheck');
    } catch (err) {
      problems.push(err.message);
    }
    const check = skipped || problems.length ? undefined : spawnSync('luacheck', ['--config', '.luacheckrc', '--formatter', 'plain', '--codes', '-'], {
      input: assembleLibrary(sources, 'check').source, encoding: 'utf8',
    });
    if (check?.error) {
      problems.push(`luacheck could not run (${check.error.message}); install it: ${PROGRAMS.luacheck.install}`);
    } else if (check) {
      for (const line of check.stdout.split('\n').filter(Boolean)) {
        const m = /^stdin:(\d+):(\d+): (.*)$/.exec(line);
        if (!m) { problems.push(`luacheck: ${line}`); continue; }
        const [file, at] = origin[Number(m[1]) - 1] ?? ['(library)', Number(m[1])];
        problems.push(`${path(file)}${at ? `:${at}` : ''}:${m[2]}: ${m[3]}`);
      }
      if (check.status !== 0 && !check.stdout.trim()) problems.push(`luacheck failed: ${check.stderr.trim()}`);
    }
    if (skipped) problems.skipped = true;
  }

  // ---- 2. no positional record reads ----
  const files = [...helpers.map(([name, text]) => [`lib/${name}.lua`, text]), ...bodies.map(([name, body]) => [`${name}.lua`, body])];
  for (const [file, text] of files) {
    const lines = text.split('\n');
    lines.forEach((line, i) => {
      if (!line.includes("'HMGET'")) return;
      // readFields is the one place: its HMGET is the line after its definition.
      if (file === 'lib/records.lua' && /^local function readFields\(/.test(lines[i - 1] ?? '')) return;
      problems.push(`${path(file)}:${i + 1}: HMGET outside readFields (lib/records.lua): read a record's fields by name`);
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
        if (holders.has(m[1])) problems.push(`${path(file)}:${i + 1}: ${m[0]} reads a record by position: use its field's name`);
      }
    });
    // ---- 6. files a reader takes in whole, helpers called by name ----
    if (lines.length - 1 > MAX_LINES) problems.push(`${path(file)}: ${lines.length - 1} lines, more than ${MAX_LINES}: move parts into helpers`);
    for (const m of text.matchAll(/^local function (\w+)\(([^)]*)\)/gm)) {
      const params = m[2].split(',').filter((p) => p.trim());
      if (params.length > 4) problems.push(`${path(file)}: ${m[1]} takes ${params.length} parameters: more than 4 go in one table of named fields`);
    }
    // ---- 4. no bare numeric reply code ----
    plain.split('\n').forEach((line, i) => {
      if (/\breturn\s*\{\s*-?\d/.test(line)) {
        problems.push(`${path(file)}:${i + 1}: a reply starts with a bare number: name its code (CODE.<name>, OUTCOME.<script>.<name>)`);
      }
    });
  }

  // ---- 3. helper files and transitions name the helpers they use ----
  const before = new Set();
  for (const [name, text] of helpers) {
    const mine = defined(text);
    problems.push(...usesProblems(path(`lib/${name}.lua`), text, new Set(before), 'the helper files before it'));
    for (const h of mine) before.add(h);
  }
  for (const [name, body] of bodies) problems.push(...usesProblems(path(`${name}.lua`), body, before, 'lib/'));

  // ---- 5. each transition's replies: its header, its decoder, the codes it returns ----
  const refusals = ScriptCode;
  for (const [name, body] of bodies) {
    const file = path(`${name}.lua`);
    const group = outcomeGroup(name);
    const outcomes = Outcome[group] ?? {};
    // A reply line's name says outcome or refusal: none may be both (decode() in reply.ts relies on it).
    for (const outcome of Object.keys(outcomes)) {
      if (outcome in refusals) problems.push(`${file}: Outcome.${group}.${outcome} has a ScriptCode's name: name it otherwise`);
    }
    const header = replyHeader(body);
    if (header.size === 0) { problems.push(`${file}: its header declares no reply (\`-- @reply <Outcome>: field, ...\`)`); continue; }
    for (const outcome of header.keys()) {
      if (outcome !== '' && !(outcome in outcomes) && !(outcome in refusals)) {
        problems.push(`${file}: \`-- @reply ${outcome}\` is neither an outcome of Outcome.${group} nor a ScriptCode`);
      }
    }
    const decoder = replies[name];
    if (!decoder) { problems.push(`${file}: no unit beside it declares its replies (export const REPLY in ${name}.ts)`); continue; }
    const decoded = new Map(Object.entries(decoder).map(([outcome, shape]) => [outcome, Object.keys(shape)]));
    for (const [outcome, fields] of header) {
      const label = outcome === '' ? 'its reply' : outcome;
      const theirs = decoded.get(outcome);
      if (!theirs) { problems.push(`${file}: declares ${label}, which its decoder (REPLY in ${name}.ts) does not`); continue; }
      if (fields.join(', ') !== theirs.join(', ')) {
        problems.push(`${file}: ${label} is \`${fields.join(', ')}\` in its header but \`${theirs.join(', ')}\` in its decoder (REPLY in ${name}.ts)`);
      }
    }
    for (const outcome of decoded.keys()) {
      if (!header.has(outcome)) problems.push(`${file}: its decoder (REPLY in ${name}.ts) declares ${outcome || 'a reply without a code'}, which its header does not`);
    }
    const plain = code(body);
    for (const m of plain.matchAll(/\bOUTCOME\.(\w+)\.(\w+)/g)) {
      if (m[1] !== group) problems.push(`${file}: returns OUTCOME.${m[1]}.${m[2]}, another script's outcome`);
      else if (!header.has(m[2])) problems.push(`${file}: returns OUTCOME.${m[1]}.${m[2]}, which its header does not declare`);
    }
    for (const m of plain.matchAll(/\bCODE\.(\w+)/g)) {
      if (!header.has(m[1])) problems.push(`${file}: returns CODE.${m[1]}, which its header does not declare`);
    }
  }
  return problems;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const sources = luaSources();
  const problems = checkLibrary(sources, await unitReplies(sources.bodies.map(([name]) => name)));
  const { bodies, helpers } = sources;
  if (problems.length) {
    console.error(`check-lua: ${problems.length} problem(s) in the transitions library:\n  ${problems.join('\n  ')}`);
    process.exit(1);
  }
  const what = `${bodies.length} transitions and ${helpers.length} helper files`;
  if (problems.skipped) {
    console.log(`check-lua: SKIPPED luacheck, which is not installed (${PROGRAMS.luacheck.install}); ` +
      `${what} read records by name, list the helpers they use, name their codes and declare the replies their decoders read`);
  } else {
    console.log(`check-lua: ${what} pass luacheck, read records by name, list the helpers they use, name their codes and declare the replies their decoders read`);
  }
}
