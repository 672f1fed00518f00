// Keeps the layering of ARCHITECTURE.md, checked by `npm test`:
// - src/api and src/worker never import each other, and src/lib imports neither (it is the
//   domain both build on); madge checks for cycles.
// - src/lib/contract (the public shapes) imports nothing at all; src/lib/client (runs in
//   browsers and edge runtimes) imports only the contract and itself; src/lib/sdk imports no
//   server package (ioredis, bullmq, express, openai), nor loads one through another file.
// - src/ui (the run inspector, a browser bundle) imports only itself, the client and the contract.
// - Only the transitions room (src/lib/transitions/) calls a Lua script.
// - The rooms of src/lib, and those of src/lib/engine (a room: a file or a folder right inside),
//   import one another one way only: no circle of rooms, so none imports back up into a room
//   that imports it. No source file passes 500 lines; src/lib has at most 8 files at its top,
//   src/lib/engine at most 25.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve, dirname, sep } from 'node:path';

const root = resolve('src');
const files = (dir) => readdirSync(dir).flatMap((f) => {
  const p = join(dir, f);
  return statSync(p).isDirectory() ? files(p) : /\.tsx?$/.test(p) ? [p] : [];
});
const SERVER_PACKAGES = ['ioredis', 'bullmq', 'express', 'openai', 'pino', 'prom-client'];

/** Folder rules, most specific first: `banned` relative folders, `packages` bare imports not allowed (or `onlyRelative`). */
const rules = [
  { dir: 'lib/contract', onlyWithin: ['lib/contract'], noPackages: true },
  { dir: 'lib/client', onlyWithin: ['lib/client', 'lib/contract'], noPackages: true },
  { dir: 'lib/sdk', banned: ['api', 'worker', 'cli'], packages: SERVER_PACKAGES },
  { dir: 'lib', banned: ['api', 'worker', 'cli', 'ui'] },
  { dir: 'api', banned: ['worker', 'cli', 'ui'] },
  { dir: 'worker', banned: ['api', 'cli', 'ui'] },
  // The run inspector is a browser bundle: itself, the browser-safe client and the contract.
  { dir: 'ui', onlyWithin: ['ui', 'lib/client', 'lib/contract'] },
];

const problems = [];
const all = files(root);
for (const file of all) {
  const rel = relative(root, file);
  const rule = rules.find((r) => rel.startsWith(`${r.dir}/`));
  const src = readFileSync(file, 'utf8');
  // Type-only imports vanish at run time; a layer is about what gets loaded.
  for (const m of src.matchAll(/(?:^|\n)\s*(import|export)\s+(type\s+)?(?:[^'";]*?\sfrom\s*)?['"]([^'"]+)['"]/g)) {
    const typeOnly = Boolean(m[2]);
    const spec = m[3];
    if (!rule) continue;
    if (spec.startsWith('.')) {
      const target = relative(root, resolve(dirname(file), spec));
      if (rule.onlyWithin && !rule.onlyWithin.some((d) => target.startsWith(`${d}/`))) {
        problems.push(`${relative('.', file)} imports ${spec} (src/${rule.dir} may import only ${rule.onlyWithin.map((d) => `src/${d}`).join(', ')})`);
      }
      if (rule.banned?.includes(target.split('/')[0])) {
        problems.push(`${relative('.', file)} imports ${spec} (src/${rule.dir} must not import src/${target.split('/')[0]})`);
      }
    } else if (!typeOnly) {
      const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
      if (rule.noPackages && !spec.startsWith('node:')) problems.push(`${relative('.', file)} imports ${spec} (src/${rule.dir} imports no package)`);
      if (rule.noPackages && spec.startsWith('node:')) problems.push(`${relative('.', file)} imports ${spec} (src/${rule.dir} must run outside Node too)`);
      if (rule.packages?.includes(pkg)) problems.push(`${relative('.', file)} imports ${spec} (src/${rule.dir} must not load ${pkg})`);
    }
  }
}

// src/lib/sdk loads no server package through another file either (sdk/retry-policy.ts once
// reached ioredis through redis.ts for one function that only reads an error's name): follow
// every import that stays at run time from each sdk file.
const runtimeImports = new Map();
for (const file of all) {
  const src = readFileSync(file, 'utf8');
  const found = [];
  for (const m of src.matchAll(/(?:^|\n)\s*(import|export)\s+(type\s+)?(?:[^'";]*?\sfrom\s*)?['"]([^'"]+)['"]/g)) {
    if (!m[2]) found.push(m[3].startsWith('.') ? resolve(dirname(file), m[3]) : m[3]);
  }
  runtimeImports.set(file, found);
}
const sdkRule = rules.find((r) => r.dir === 'lib/sdk');
for (const start of all.filter((f) => relative(root, f).startsWith('lib/sdk/'))) {
  const seen = new Set([start]);
  const queue = [[start, []]];
  while (queue.length) {
    const [file, via] = queue.shift();
    for (const spec of runtimeImports.get(file) ?? []) {
      if (spec.startsWith('/')) {
        if (!seen.has(spec) && runtimeImports.has(spec)) { seen.add(spec); queue.push([spec, [...via, spec]]); }
        continue;
      }
      const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
      if (via.length && sdkRule.packages.includes(pkg)) {
        problems.push(`${relative('.', start)} loads ${pkg} through ${via.map((f) => relative('.', f)).join(' -> ')} (src/lib/sdk must not load ${pkg})`);
      }
    }
  }
}

// The gateway is the only caller of scripts: no other file names the script helpers or a
// registered script command.
const GATEWAY = join(root, 'lib/transitions') + sep;
// Nor does any file send a script of its own (EVAL, EVALSHA, a defined command): every script
// is a function of the library, so the gateway's replica acknowledgements cover them all.
for (const file of all) {
  if (file.startsWith(GATEWAY)) continue;
  const src = readFileSync(file, 'utf8');
  const m = /\b(callScript|queueScript|loadLibrary|fcall|baton_[a-z_]+_v\d+(?:_[0-9a-f]+)?)\b/.exec(src)
    ?? /\.(eval|evalsha|defineCommand)\(/.exec(src);
  if (m) problems.push(`${relative('.', file)} uses ${m[1]}: only src/lib/transitions/ calls Lua scripts`);
}
for (const dir of ['test', 'bench']) {
  for (const file of files(resolve(dir))) {
    // A call or an import of the script callers (a name in prose or a fixture is neither), or a
    // library function's own name (what an FCALL would send).
    const m = /\b(callScript|queueScript)\b(?=\s*[(,}])|\b(baton_[a-z_]+_v\d+(?:_[0-9a-f]+)?)\b/.exec(readFileSync(file, 'utf8'));
    if (m) problems.push(`${relative('.', file)} uses ${m[1] ?? m[2]}: tests and benchmarks call scripts through the gateway`);
  }
}

// Rooms: every import, type-only ones too (a room that needs another's types is read with it).
const ROOMED = [{ dir: 'lib', maxTopFiles: 8 }, { dir: 'lib/engine', maxTopFiles: 25 }];
const MAX_FILE_LINES = 500;
const importsOf = (file) => [...readFileSync(file, 'utf8').matchAll(/(?:^|\n)\s*(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\sfrom\s*)?['"](\.[^'"]+)['"]/g)]
  .map((m) => relative(root, resolve(dirname(file), m[1])));
for (const { dir, maxTopFiles } of ROOMED) {
  const top = readdirSync(join(root, dir)).filter((f) => statSync(join(root, dir, f)).isFile());
  if (top.length > maxTopFiles) problems.push(`src/${dir} has ${top.length} files at its top, more than ${maxTopFiles}: give them rooms`);
  const roomOf = (rel) => (rel.startsWith(`${dir}/`) ? rel.slice(dir.length + 1).split('/')[0] : undefined);
  /** room -> room it imports -> one import that makes the arrow (file -> file). */
  const arrows = new Map();
  for (const file of all) {
    const from = roomOf(relative(root, file));
    if (from === undefined) continue;
    for (const target of importsOf(file)) {
      const to = roomOf(target);
      if (to === undefined || to === from) continue;
      if (!arrows.has(from)) arrows.set(from, new Map());
      if (!arrows.get(from).has(to)) arrows.get(from).set(to, `src/${relative(root, file)} -> src/${target}`);
    }
  }
  // A circle of rooms, found by a depth-first walk: each named once, with the imports that close it.
  const state = new Map();
  // `rooms`: the walk's way here, `whys[k]` the import from rooms[k] to the next.
  const walk = (room, rooms, whys) => {
    state.set(room, 'open');
    for (const [to, why] of arrows.get(room) ?? []) {
      if (state.get(to) === 'open') {
        const at = rooms.includes(to) ? rooms.indexOf(to) : rooms.length;
        const circle = [...rooms.slice(at), room, to];
        problems.push(`src/${dir}: its rooms import one another in a circle: ${circle.join(' -> ')} (${[...whys.slice(at), why].join('; ')})`);
      } else if (!state.has(to)) {
        walk(to, [...rooms, room], [...whys, why]);
      }
    }
    state.set(room, 'done');
  };
  for (const room of arrows.keys()) if (!state.has(room)) walk(room, [], []);
}
for (const file of all) {
  const lines = readFileSync(file, 'utf8').split('\n').length - 1;
  if (lines > MAX_FILE_LINES) problems.push(`${relative('.', file)} has ${lines} lines, more than ${MAX_FILE_LINES}: split it by what it does`);
}

if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(`layers ok (${all.length} files); only the transitions room calls scripts; the rooms of src/lib and src/lib/engine form no circle`);
