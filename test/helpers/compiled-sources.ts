import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/**
 * The `baton` processes tests spawn run src/ compiled once per test run, not through tsx.
 *
 * Through tsx every child process compiled the sources at its start: 2.3 s of CPU to the
 * API's ready line, against 1.1 s from JavaScript compiled beforehand (measured on an idle
 * 2-core machine), and the suite starts a few hundred such processes. So the global setup
 * compiles src/ with esbuild (what tsx runs too, file by file) into a temporary folder laid
 * out as the checkout is: each module stays its own file (import.meta.url-relative paths
 * such as the Lua scripts' folder and ../../package.json resolve as they do from src/), its
 * relative imports turned from .ts into .js, the files that are not TypeScript copied beside
 * them, and node_modules, package.json, dist/ and templates/ linked from the checkout.
 *
 * The folder's baton.mjs starts the CLI from there. It also maps any import of a src/ module
 * by its TypeScript path (a test's agent module imports ../../src/lib/sdk/agent.ts) to the
 * compiled file, so a process holds one copy of each module, as it did through tsx. `baton
 * init` keeps running from the sources (test/helpers/baton-src.mjs): it finds its package
 * folder beside its own file, which must be the checkout.
 *
 * The quick files spawn a second layout of the same code, bundled/ (`bundledLauncher`): every
 * module is still an entry of its own (an agent module's import of src/lib/sdk/errors.ts gets
 * the one instance the engine uses), but the code of the modules and of the packages they
 * import is split by esbuild into the chunks the entries share, so a process loads about 500
 * files instead of 1,100. A worker uses 0.5 s of CPU to its ready line instead of 0.8, an API
 * 0.6 instead of 1.0 (an idle 2-core machine), and the quick files start about 150 of them.
 * Each module's import.meta.url is its file in the per-module layout, which the Lua scripts,
 * the schema thread and the module hooks are read from. The long files spawn the per-module
 * layout, which is what dist/ is.
 */
export interface CompiledSources {
  /** The temporary folder. */
  dir: string;
  /** Its launcher: `node <launcher> <command>` is `baton <command>` of the checkout. */
  launcher: string;
  /** The same, running the bundled layout. */
  bundledLauncher: string;
  remove(): void;
}

/** What every build here makes: ES modules for the oldest Node Baton supports, errors only. */
const NODE_ESM = { format: 'esm', platform: 'node', target: 'node20', logLevel: 'error' } as const;

/** Compiles `<root>src/` (root with a trailing slash) into a new temporary folder. */
export async function compileSources(root: string): Promise<CompiledSources> {
  const { build } = await import('esbuild');
  const dir = mkdtempSync(join(tmpdir(), 'baton-test-js-'));
  const src = join(root, 'src');
  const files = readdirSync(src, { recursive: true, encoding: 'utf8' });
  // The run inspector (src/ui) is built by Vite into dist/ui, which the API serves; not run by Node.
  const served = (f: string) => !f.startsWith('ui/') && !f.startsWith('ui\\');
  const modules = files.filter((f) => served(f) && f.endsWith('.ts') && !f.endsWith('.d.ts'));
  try {
    await build({
      entryPoints: modules.map((f) => join(src, f)),
      outdir: join(dir, 'src'),
      outbase: src,
      // Bundling only to rewrite import paths: every relative import stays an import of its own
      // compiled file (the plugin below), packages stay in node_modules.
      bundle: true,
      packages: 'external',
      ...NODE_ESM,
      sourcemap: true,
      tsconfig: join(root, 'tsconfig.json'),
      plugins: [{
        name: 'own-files',
        setup(b) {
          b.onResolve({ filter: /^\.\.?\/.*\.ts$/ }, (a) => ({ path: a.path.replace(/\.ts$/, '.js'), external: true }));
        },
      }],
    });
    // The Lua scripts and any other file a module reads beside itself.
    for (const f of files) {
      if (served(f) && !f.endsWith('.ts') && statSync(join(src, f)).isFile()) cpSync(join(src, f), join(dir, 'src', f));
    }
    for (const link of ['node_modules', 'package.json', 'dist', 'templates']) symlinkSync(join(root, link), join(dir, link));
    writeFileSync(join(dir, 'hooks.mjs'), HOOKS);
    const fromSources = pathToFileURL(join(root, 'test/helpers/baton-src.mjs')).href;
    const from = pathToFileURL(`${src}/`).href;
    writeFileSync(join(dir, 'baton.mjs'), launcher({ from, to: pathToFileURL(`${join(dir, 'src')}/`).href, main: './src/cli/main.js', fromSources }));
    await bundle(build, dir, modules.map((f) => join(dir, 'src', f.replace(/\.ts$/, '.js'))));
    await compileFixtures(build, root, dir);
    writeFileSync(join(dir, 'baton-bundled.mjs'), launcher({
      from, to: pathToFileURL(`${join(dir, 'bundled', 'src')}/`).href, main: './bundled/src/cli/main.js', fromSources,
      fixtures: { from: `${join(root, 'test', 'fixtures')}/`, to: `${join(dir, 'fixtures')}/` },
    }));
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    dir,
    launcher: join(dir, 'baton.mjs'),
    bundledLauncher: join(dir, 'baton-bundled.mjs'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * The agent modules of test/fixtures compiled into `<dir>/fixtures`, for the bundled layout: an
 * import of a src/ module is of its bundled entry, of a fixture the compiled fixture. A worker
 * given one of these needs neither tsx nor the module hooks' thread, 0.6 s of CPU at each start
 * (an idle 2-core machine). The long drills load the TypeScript modules, as a user's are.
 */
async function compileFixtures(build: typeof import('esbuild').build, root: string, dir: string): Promise<void> {
  const fixtures = join(root, 'test', 'fixtures');
  const src = `${join(root, 'src')}/`;
  await build({
    entryPoints: readdirSync(fixtures).filter((f) => f.endsWith('.ts')).map((f) => join(fixtures, f)),
    outdir: join(dir, 'fixtures'),
    bundle: true,
    packages: 'external',
    ...NODE_ESM,
    tsconfig: join(root, 'tsconfig.json'),
    plugins: [{
      name: 'fixture-imports',
      setup(b) {
        b.onResolve({ filter: /^\.\.?\/.*\.ts$/ }, (a) => {
          const target = join(a.resolveDir, a.path);
          if (target.startsWith(src)) return { path: pathToFileURL(join(dir, 'bundled', 'src', target.slice(src.length).replace(/\.ts$/, '.js'))).href, external: true };
          return { path: a.path.replace(/\.ts$/, '.js'), external: true };
        });
      },
    }],
  });
}

/** The compiled modules (`entries`, under `<dir>/src`) bundled into `<dir>/bundled`: see above. */
async function bundle(build: typeof import('esbuild').build, dir: string, entries: string[]): Promise<void> {
  const compiled = `${join(dir, 'src')}/`;
  await build({
    entryPoints: entries,
    outdir: join(dir, 'bundled'),
    outbase: dir,
    bundle: true,
    splitting: true,
    ...NODE_ESM,
    // Loaded on their own terms: an optional native addon, and what cli/tracing.ts and the agent
    // loader import only when asked to (OpenTelemetry's SDK, tsx for a .ts agent module).
    external: ['msgpackr-extract', '@opentelemetry/sdk-node', '@opentelemetry/resources', 'tsx', 'tsx/*'],
    // Packages written as CommonJS call require(), which an ES module does not have.
    banner: { js: "import { createRequire as __batonRequire } from 'node:module'; const require = __batonRequire(import.meta.url);" },
    plugins: [{
      name: 'module-urls',
      setup(b) {
        b.onLoad({ filter: /\.js$/ }, (a) => a.path.startsWith(compiled)
          ? { contents: readFileSync(a.path, 'utf8').replaceAll('import.meta.url', JSON.stringify(pathToFileURL(a.path).href)), loader: 'js' }
          : undefined);
      },
    }],
  });
}

interface LauncherOptions {
  /** src/ of the checkout and of the layout run, as file URLs: the hooks map the one to the other. */
  from: string;
  to: string;
  /** The layout's CLI module, relative to the launcher. */
  main: string;
  /** `baton init`, run from the sources. */
  fromSources: string;
  /** test/fixtures and its compiled agent modules, as paths: `--agents` of the one runs the other. */
  fixtures?: { from: string; to: string };
}

const launcher = (o: LauncherOptions) => `// Written by test/helpers/compiled-sources.ts for one test run.
import { register } from 'node:module';

if (process.argv[2] === 'init') {
  await import(${JSON.stringify(o.fromSources)});
} else {
  const fixtures = ${JSON.stringify(o.fixtures ?? null)};
  // An agent module of test/fixtures runs compiled (no tsx, no hooks), where this layout has it.
  const compiled = (path) => fixtures && path.startsWith(fixtures.from) && path.endsWith('.ts') && !path.slice(fixtures.from.length).includes('/')
    ? fixtures.to + path.slice(fixtures.from.length, -3) + '.js' : path;
  const agents = [];
  process.argv = process.argv.map((a, i, argv) => {
    const given = argv[i - 1] === '--agents' ? a : a.startsWith('--agents=') ? a.slice(9) : undefined;
    if (given === undefined) return a;
    agents.push(compiled(given));
    return given === a ? agents.at(-1) : '--agents=' + agents.at(-1);
  });
  // Only agent modules in TypeScript import src/ by path; the hooks' thread costs a start 0.3 s of CPU.
  if (agents.some((a) => !a.endsWith('.js'))) {
    register('./hooks.mjs', import.meta.url, { data: { from: ${JSON.stringify(o.from)}, to: ${JSON.stringify(o.to)} } });
  }
  await import(${JSON.stringify(o.main)});
}
`;

/** A src/ module imported by its TypeScript path resolves to its compiled file. */
const HOOKS = `let from;
let to;

export function initialize(data) {
  ({ from, to } = data);
}

export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  if (r.url.startsWith(from) && r.url.endsWith('.ts') && !r.url.startsWith(from + 'ui/')) {
    return { ...r, url: to + r.url.slice(from.length, -3) + '.js', format: 'module' };
  }
  return r;
}
`;
