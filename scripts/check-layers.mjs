// Keeps the layering of DESIGN.md: src/api and src/worker never import each other, and
// src/lib imports neither (it is the domain both build on). madge checks for cycles.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve, dirname } from 'node:path';

const root = resolve('src');
const rules = { api: ['worker', 'cli'], worker: ['api', 'cli'], lib: ['api', 'worker', 'cli'] };
const files = (dir) => readdirSync(dir).flatMap((f) => {
  const p = join(dir, f);
  return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
});
const problems = [];
for (const file of files(root)) {
  const layer = relative(root, file).split('/')[0];
  const banned = rules[layer];
  if (!banned) continue;
  const src = readFileSync(file, 'utf8');
  for (const m of src.matchAll(/(?:from|import)\s*\(?\s*['"](\.[^'"]+)['"]/g)) {
    const target = relative(root, resolve(dirname(file), m[1])).split('/')[0];
    if (banned.includes(target)) problems.push(`${relative('.', file)} imports ${m[1]} (src/${layer} must not import src/${target})`);
  }
}
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(`layers ok (${files(root).length} files)`);
