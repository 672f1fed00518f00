// Builds dist/ from src/: tsc emits ESM, .d.ts and source maps (tsconfig.build.json), the
// Lua scripts are copied next to the compiled script loader, which reads them from its own folder
// beside itself, and Vite builds the run inspector into dist/ui. `npm run build` and `npm pack`
// (prepack) call this file; bin/baton.js calls buildIfStale() in a checkout, so `npm start`
// never runs code older than src/.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const DIST = join(ROOT, 'dist');
const STAMP = join(DIST, '.build-stamp');
const LOCK = join(ROOT, '.build.lock');
/** What the build reads: a change to any of these makes dist/ stale. */
const INPUTS = ['src', 'tsconfig.json', 'tsconfig.build.json', 'scripts/build.mjs', 'vite.ui.config.ts'];
/** tsc takes seconds here; a lock this old was left by a build that was killed. */
const ABANDONED_LOCK_MS = 120_000;

/** Newest modification time among the inputs. Folders count too: deleting or renaming a file changes its folder. */
function newestInput() {
  let newest = 0;
  const visit = (path) => {
    const st = statSync(path, { throwIfNoEntry: false });
    if (!st) return;
    newest = Math.max(newest, st.mtimeMs);
    if (st.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  for (const input of INPUTS) visit(join(ROOT, input));
  return newest;
}

/** dist/ is missing, or a source changed after the build that made it began. */
export function isStale() {
  const stamp = statSync(STAMP, { throwIfNoEntry: false });
  return !stamp || newestInput() > stamp.mtimeMs;
}

/**
 * One build, into a temporary folder swapped in at the end: a process starting meanwhile finds
 * the old dist/ or the new one, never half of one.
 */
export function build() {
  // The stamp carries the time the build began, so a source saved while tsc ran counts as newer.
  const began = new Date();
  let tsc;
  try {
    tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  } catch {
    throw new Error('building dist/ needs TypeScript, a devDependency: run `npm ci` (without --omit=dev) first');
  }
  const tmp = join(ROOT, `dist.tmp-${process.pid}`);
  rmSync(tmp, { recursive: true, force: true });
  try {
    const r = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', tmp], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`tsc failed (exit ${r.status ?? r.signal})`);
    // The transitions' Lua sits beside their units (src/lib/transitions/<name>.lua, lib/*.lua).
    cpSync(join(ROOT, 'src/lib/transitions'), join(tmp, 'lib/transitions'), {
      recursive: true, filter: (from) => !/\.[a-z]+$/.test(from) || from.endsWith('.lua'),
    });
    // The run inspector, served by the API from dist/ui (vite.ui.config.ts).
    // vite's package exports no bin path; its CLI sits two folders above its entry module.
    const vite = join(dirname(createRequire(import.meta.url).resolve('vite')), '../../bin/vite.js');
    const ui = spawnSync(process.execPath, [vite, 'build', '--config', join(ROOT, 'vite.ui.config.ts'), '--outDir', join(tmp, 'ui')], { stdio: 'inherit', cwd: ROOT });
    if (ui.status !== 0) throw new Error(`the run inspector's build failed (exit ${ui.status ?? ui.signal})`);
    rewriteDeclarationImports(tmp);
    writeFileSync(join(tmp, '.build-stamp'), '');
    utimesSync(join(tmp, '.build-stamp'), began, began);
    const old = join(ROOT, `dist.old-${process.pid}`);
    if (existsSync(DIST)) renameSync(DIST, old);
    renameSync(tmp, DIST);
    rmSync(old, { recursive: true, force: true });
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * tsc rewrites `./x.ts` to `./x.js` in the JavaScript it emits but keeps `.ts` in the
 * declarations; TypeScript before 5.0 cannot resolve those, so the declarations get `.js` too.
 */
function rewriteDeclarationImports(dir) {
  for (const name of readdirSync(dir, { recursive: true })) {
    if (!name.endsWith('.d.ts')) continue;
    const file = join(dir, name);
    const text = readFileSync(file, 'utf8');
    const fixed = text.replace(/((?:from|import)\s*\(?\s*)(['"])(\.{1,2}\/[^'"]*?)\.ts\2/g, '$1$2$3.js$2');
    if (fixed !== text) writeFileSync(file, fixed);
  }
}

/** Builds while holding a lock folder, so `baton` commands started together build once. */
async function withLock(fn) {
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      const lock = statSync(LOCK, { throwIfNoEntry: false });
      if (lock && Date.now() - lock.mtimeMs > ABANDONED_LOCK_MS) rmSync(LOCK, { recursive: true, force: true });
      else await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    return fn();
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

/** Rebuilds dist/ when it is stale, with one line on stderr saying so; true when it built. */
export async function buildIfStale() {
  if (!isStale()) return false;
  return withLock(() => {
    // Another process may have built it while this one waited for the lock.
    if (!isStale()) return false;
    console.error('baton: dist/ is missing or older than src/; building it first (npm run build)');
    build();
    return true;
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    await withLock(build);
  } catch (err) {
    console.error(`build: ${err.message}`);
    process.exit(1);
  }
}
