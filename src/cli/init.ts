import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/**
 * `baton init [dir]`: a new folder for agent modules, with `baton-agents` as its dependency,
 * so `--agents ./agents.mjs` works outside this package (an agent module imports
 * `baton-agents`, which Node finds only in a node_modules/ above the module).
 */

export const INIT_USAGE = `Init (a new folder for your agents; also: npx baton-agents init <dir>):
  init [dir] [--no-install] [--package <spec>]
      makes dir (default: this folder; it must be empty or new) with package.json, agents.mjs
      (agents hello and publish), .gitignore and README.md, then runs npm install there.
      The baton-agents dependency is the copy init runs from: a checkout of Baton is linked
      (file:<checkout>); an installed copy whose version the npm registry has is ^<version>,
      one it lacks (installed from a tarball) is packed into the folder (file:baton-agents-<version>.tgz).
      --package: another dependency, e.g. a tarball, a git URL or a version range (BATON_INIT_PACKAGE)`;

/** This package's folder: two up from src/cli/ and from dist/cli/ alike. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url)).replace(/[\\/]$/, '');

class InitError extends Error {}

/**
 * Runs `baton init`; returns the exit status. `root`: the Baton package init runs from (its
 * own folder; a test names a stand-in).
 */
export function runInit(argv: string[], env: Record<string, string | undefined> = process.env, root = PACKAGE_ROOT): number {
  let values: { 'no-install'?: boolean; package?: string; help?: boolean };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: { 'no-install': { type: 'boolean' }, package: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${INIT_USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(INIT_USAGE);
    return 0;
  }
  if (positionals.length > 1) {
    console.error(`init takes one folder, not ${positionals.length}\n\n${INIT_USAGE}`);
    return 2;
  }
  const dir = resolve(positionals[0] ?? '.');
  let dep: Dependency;
  try {
    checkFolder(dir);
    dep = dependency(values.package ?? env.BATON_INIT_PACKAGE, root, env);
    makeFolder(dir, dep, root);
  } catch (err) {
    if (!(err instanceof InitError)) throw err;
    console.error(err.message);
    return 2;
  }
  const shown = relative(process.cwd(), dir) || '.';
  console.log(`made ${shown}/: package.json, agents.mjs (agents hello and publish), .gitignore, README.md${dep.packed ? `, ${dep.packed}` : ''}`);
  console.log(`baton-agents: ${dep.spec}, ${dep.how}`);
  const steps = shown === '.' ? [] : [`cd ${shown}`];
  if (values['no-install']) {
    steps.push('npm install');
  } else {
    console.log('npm install ...');
    const r = spawnSync('npm', ['install', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit', shell: process.platform === 'win32' });
    if (r.status !== 0) {
      // Running npm install again would fail the same way unless what it lacked is fixed: say what that may be.
      console.error(`npm install failed in ${shown} (${r.error?.message ?? `exit ${r.status ?? r.signal}`}); the folder is made.\n` +
        `It installs baton-agents as ${dep.spec}: ${dep.fix}`);
      return 1;
    }
  }
  console.log(`\nnext:\n${[...steps, 'npm start'].map((s) => `  ${s}`).join('\n')}\n` +
    '\n`npm start` runs `baton start --watch --agents ./agents.mjs`: the API on http://127.0.0.1:3000 (PORT=3100\n' +
    'npm start for another port) and a worker serving hello and publish, reloaded when agents.mjs is saved, with a\n' +
    'redis-server of its own (on PATH)\n' +
    'keeping its data in .baton/. Then, in a second terminal in the folder: npx baton keys create --scope dev --role admin');
  return 0;
}

/** What package.json names as the `baton-agents` dependency, and why, in words for the output. */
interface Dependency {
  spec: string;
  how: string;
  /** What to do when npm install fails with it. */
  fix: string;
  /** The tarball packed into the new folder, by name. */
  packed?: string;
}

/**
 * The dependency: the one given, else the copy init runs from. A checkout is linked (its own
 * node_modules and build serve the folder, so an edit in it is seen there); an installed copy
 * is named by version when the registry has that version, and otherwise (a tarball's install,
 * or no registry reachable) is packed into the folder, which then installs without it.
 */
function dependency(given: string | undefined, root: string, env: Record<string, string | undefined>): Dependency {
  const otherwise = 'or name another with --package <tarball | git URL | version>';
  if (given !== undefined) {
    return { spec: dependencySpec(given), how: 'as --package (BATON_INIT_PACKAGE) names it', fix: `check that npm can fetch it, ${otherwise}` };
  }
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
  if (existsSync(join(root, 'src', 'index.ts'))) {
    // A link uses the checkout's node_modules as they are (npm installs nothing into a link's
    // folder): without them Baton could not load, so say so now rather than at npm start.
    if (!existsSync(join(root, 'node_modules'))) throw new InitError(`${root} is a checkout of Baton without its dependencies: run npm ci there first, then init again`);
    return {
      spec: `file:${root}`,
      how: 'linked to this checkout of Baton (its build and node_modules serve the folder)',
      fix: `run npm ci in ${root}, ${otherwise}`,
    };
  }
  const published = registryHas(version, env);
  if (published === true) return { spec: `^${version}`, how: 'from the npm registry', fix: `check that npm reaches its registry, ${otherwise}` };
  const packed = `baton-agents-${version}.tgz`;
  const why = published === false ? 'the npm registry does not have this version' : `the npm registry could not be asked: ${published}`;
  return {
    spec: `file:${packed}`,
    how: `this installed copy packed into the folder (${why})`,
    fix: `its dependencies come from the npm registry: check that npm reaches it, ${otherwise}`,
    packed,
  };
}

/** Whether the npm registry has baton-agents at `version`: true, false, or why it could not tell. */
function registryHas(version: string, env: Record<string, string | undefined>): true | false | string {
  const r = spawnSync('npm', ['view', `baton-agents@${version}`, 'version', '--json'], {
    env: env as NodeJS.ProcessEnv, encoding: 'utf8', timeout: 30_000, shell: process.platform === 'win32',
  });
  if (r.error) return r.error.message;
  // A package the registry lacks is E404; a version it lacks is an empty answer.
  if (r.status !== 0) return /E404/.test(`${r.stdout}${r.stderr}`) ? false : (r.stderr.trim().split('\n')[0] || `npm view exited ${r.status}`);
  return r.stdout.trim() !== '';
}

/**
 * A given dependency as package.json names it: a spec (a version range, a git URL) as it is,
 * a local path made absolute (the new folder is somewhere else).
 */
function dependencySpec(given: string): string {
  if (given.trim() === '') throw new InitError('--package (BATON_INIT_PACKAGE) is empty: give a version range, a tarball or a git URL');
  const path = given.startsWith('file:') ? given.slice('file:'.length) : given;
  const isPath = given.startsWith('file:') || /^(\.{1,2}[\\/]|[\\/]|[A-Za-z]:[\\/])/.test(given) || (!given.includes(':') && /\.(tgz|tar\.gz)$/.test(given));
  return isPath ? `file:${resolve(path)}` : given;
}

/** A folder with anything in it is refused, so nothing is overwritten. */
function checkFolder(dir: string): void {
  const st = statSync(dir, { throwIfNoEntry: false });
  if (st && !st.isDirectory()) throw new InitError(`${dir} exists and is not a folder: name a new folder, e.g. baton init my-agents`);
  if (st && readdirSync(dir).length > 0) throw new InitError(`${dir} is not empty: init makes a new folder; name one, e.g. baton init my-agents`);
}

/** Writes the folder's files, and the packed copy of Baton it depends on when there is one. */
function makeFolder(dir: string, dep: Dependency, root: string): void {
  mkdirSync(dir, { recursive: true });
  if (dep.packed) {
    // --ignore-scripts: an installed copy has its build already and not the scripts that make it.
    const r = spawnSync('npm', ['pack', root, '--ignore-scripts', '--pack-destination', dir, '--silent'], {
      encoding: 'utf8', timeout: 120_000, shell: process.platform === 'win32',
    });
    if (r.status !== 0 || !existsSync(join(dir, dep.packed))) {
      throw new InitError(`could not pack ${root} into ${dir} (${r.error?.message ?? r.stderr.trim()}): name the dependency with --package`);
    }
  }
  const name = packageName(basename(dir));
  const pkg = {
    name,
    version: '0.1.0',
    private: true,
    type: 'module',
    // --watch: a save of agents.mjs (or of a file it imports) reloads the agents, runs in flight kept.
    scripts: { start: 'baton start --watch --agents ./agents.mjs', worker: 'baton worker --agents ./agents.mjs' },
    dependencies: { 'baton-agents': dep.spec },
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  writeFileSync(join(dir, 'agents.mjs'), readFileSync(join(root, 'templates/init/agents.mjs'), 'utf8'));
  // .baton/ holds the local Redis's data and the development key of `npm start`.
  writeFileSync(join(dir, '.gitignore'), 'node_modules/\n.baton/\n');
  writeFileSync(join(dir, 'README.md'), readme(name));
}

/** A valid npm package name from a folder's name (lower case; other characters become dashes). */
function packageName(folder: string): string {
  const name = folder.toLowerCase().replace(/[^a-z0-9._~-]+/g, '-').replace(/^[._-]+/, '').slice(0, 214);
  return name || 'my-agents';
}

function readme(name: string): string {
  return `# ${name}

Agents served by [Baton](https://www.npmjs.com/package/baton-agents): \`agents.mjs\` exports them
(\`hello\` streams a greeting; \`publish\` drafts, then waits for an approval).

\`\`\`sh
npm start         # baton start --watch --agents ./agents.mjs: API on http://127.0.0.1:3000, a worker, a local redis-server
PORT=3100 npm start   # the same on another port (then PORT=3100 in the second terminal too)
npm run worker    # a worker alone, for a Baton elsewhere: REDIS_URL=redis://... npm run worker
\`\`\`

In a second terminal, a key and a run:

\`\`\`sh
KEY=$(npx baton keys create --scope dev --role admin --json | jq -r .key)
API=http://127.0.0.1:\${PORT:-3000}/v1/scopes/dev
RUN=$(curl -s -X POST $API/runs -H "authorization: Bearer $KEY" -H 'content-type: application/json' \\
  -d '{"sessionId":"s1","agent":"hello","input":{"content":"world"}}' | jq -r .id)
curl -sN $API/runs/$RUN/events -H "authorization: Bearer $KEY"
\`\`\`

A \`publish\` run waits for \`wait:approval:1\`; resume it with
\`curl -X POST $API/runs/$RUN/waits/wait:approval:1 -H "authorization: Bearer $KEY" -H 'content-type: application/json' -d '{"value":{"approved":true}}'\`.
The run inspector is at http://127.0.0.1:3000/ui.

\`npm start\` reloads the agents when \`agents.mjs\`, or a file it imports by a relative path, is
saved: a new worker process starts with the new code, and the previous one finishes the runs it
holds (runs still going after \`SHUTDOWN_GRACE_MS\`, 10 s by default, are handed to the new one).
A save that does not load is logged (\`agent modules failed to load\`, with the file and line) and
the previous worker keeps serving until the next save. \`npm run worker\` does not reload.
`;
}
