// Keeps the layering of DESIGN.md: src/api and src/worker never import each other, and
// src/lib imports neither (it is the domain both build on). src/ui is a browser bundle: it may
// import only itself and the browser-safe client (src/lib/client). madge checks for cycles.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve, dirname } from 'node:path';

const root = resolve('src');
const rules = { api: ['worker', 'cli', 'ui'], worker: ['api', 'cli', 'ui'], lib: ['api', 'worker', 'cli', 'ui'], ui: ['api', 'worker', 'cli'] };
// Inside src/lib, the one folder the browser bundle may use.
const UI_MAY_USE_FROM_LIB = 'lib/client/';
const files = (dir) => readdirSync(dir).flatMap((f) => {
  const p = join(dir, f);
  return statSync(p).isDirectory() ? files(p) : /\.tsx?$/.test(p) ? [p] : [];
});
const problems = [];
for (const file of files(root)) {
  const layer = relative(root, file).split('/')[0];
  const banned = rules[layer];
  if (!banned) continue;
  const src = readFileSync(file, 'utf8');
  for (const m of src.matchAll(/(?:from|import)\s*\(?\s*['"](\.[^'"]+)['"]/g)) {
    const path = relative(root, resolve(dirname(file), m[1]));
    const target = path.split('/')[0];
    if (banned.includes(target)) problems.push(`${relative('.', file)} imports ${m[1]} (src/${layer} must not import src/${target})`);
    else if (layer === 'ui' && target === 'lib' && !path.startsWith(UI_MAY_USE_FROM_LIB)) {
      problems.push(`${relative('.', file)} imports ${m[1]} (src/ui may use only src/${UI_MAY_USE_FROM_LIB} of src/lib)`);
    }
  }
}
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(`layers ok (${files(root).length} files)`);
