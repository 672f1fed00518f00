import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
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
      --package: the baton-agents dependency to install, e.g. a tarball or a git URL
      (BATON_INIT_PACKAGE; default ^<this version>)`;

/** This package's folder: two up from src/cli/ and from dist/cli/ alike. */
const PACKAGE_ROOT = new URL('../../', import.meta.url);

class InitError extends Error {}

/** Runs `baton init`; returns the exit status. */
export function runInit(argv: string[], env: Record<string, string | undefined> = process.env): number {
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
  try {
    const spec = dependencySpec(values.package ?? env.BATON_INIT_PACKAGE);
    makeFolder(dir, spec);
  } catch (err) {
    if (!(err instanceof InitError)) throw err;
    console.error(err.message);
    return 2;
  }
  const shown = relative(process.cwd(), dir) || '.';
  console.log(`made ${shown}/: package.json, agents.mjs (agents hello and publish), .gitignore, README.md`);
  const steps = shown === '.' ? [] : [`cd ${shown}`];
  if (values['no-install']) {
    steps.push('npm install');
  } else {
    console.log('npm install ...');
    const r = spawnSync('npm', ['install', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit', shell: process.platform === 'win32' });
    if (r.status !== 0) {
      console.error(`npm install failed in ${shown} (${r.error?.message ?? `exit ${r.status ?? r.signal}`}); the folder is made: run npm install there again`);
      return 1;
    }
  }
  console.log(`\nnext:\n${[...steps, 'npm start'].map((s) => `  ${s}`).join('\n')}\n` +
    '\n`npm start` runs `baton start --agents ./agents.mjs`: the API on http://127.0.0.1:3000 and a worker\n' +
    'serving hello and publish, with a redis-server of its own (on PATH) keeping its data in .baton/.\n' +
    'Then, in a second terminal in the folder: npx baton keys create --scope dev --role admin');
  return 0;
}

/**
 * What package.json names as the `baton-agents` dependency: the given spec (a version range,
 * a tarball, a git URL), a local path made absolute (the new folder is somewhere else), or
 * `^<this version>`.
 */
function dependencySpec(given: string | undefined): string {
  if (given !== undefined) {
    if (given.trim() === '') throw new InitError('--package (BATON_INIT_PACKAGE) is empty: give a version range, a tarball or a git URL');
    const path = given.startsWith('file:') ? given.slice('file:'.length) : given;
    const isPath = given.startsWith('file:') || /^(\.{1,2}[\\/]|[\\/]|[A-Za-z]:[\\/])/.test(given) || (!given.includes(':') && /\.(tgz|tar\.gz)$/.test(given));
    return isPath ? `file:${resolve(path)}` : given;
  }
  const own = JSON.parse(readFileSync(new URL('package.json', PACKAGE_ROOT), 'utf8')) as { version: string };
  return `^${own.version}`;
}

/** Writes the folder's files; a folder with anything in it is refused, so nothing is overwritten. */
function makeFolder(dir: string, spec: string): void {
  const st = statSync(dir, { throwIfNoEntry: false });
  if (st && !st.isDirectory()) throw new InitError(`${dir} exists and is not a folder: name a new folder, e.g. baton init my-agents`);
  if (st && readdirSync(dir).length > 0) throw new InitError(`${dir} is not empty: init makes a new folder; name one, e.g. baton init my-agents`);
  mkdirSync(dir, { recursive: true });
  const name = packageName(basename(dir));
  const pkg = {
    name,
    version: '0.1.0',
    private: true,
    type: 'module',
    scripts: { start: 'baton start --agents ./agents.mjs', worker: 'baton worker --agents ./agents.mjs' },
    dependencies: { 'baton-agents': spec },
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  writeFileSync(join(dir, 'agents.mjs'), readFileSync(new URL('templates/init/agents.mjs', PACKAGE_ROOT), 'utf8'));
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
npm start         # baton start --agents ./agents.mjs: API on http://127.0.0.1:3000, a worker, a local redis-server
npm run worker    # a worker alone, for a Baton elsewhere: REDIS_URL=redis://... npm run worker
\`\`\`

In a second terminal, a key and a run:

\`\`\`sh
KEY=$(npx baton keys create --scope dev --role admin --json | jq -r .key)
API=http://127.0.0.1:3000/v1/scopes/dev
RUN=$(curl -s -X POST $API/runs -H "authorization: Bearer $KEY" -H 'content-type: application/json' \\
  -d '{"sessionId":"s1","agent":"hello","input":{"content":"world"}}' | jq -r .id)
curl -sN $API/runs/$RUN/events -H "authorization: Bearer $KEY"
\`\`\`

A \`publish\` run waits for \`wait:approval:1\`; resume it with
\`curl -X POST $API/runs/$RUN/waits/wait:approval:1 -H "authorization: Bearer $KEY" -H 'content-type: application/json' -d '{"value":{"approved":true}}'\`.
The run inspector is at http://127.0.0.1:3000/ui. After editing \`agents.mjs\`, restart \`npm start\`.
`;
}
