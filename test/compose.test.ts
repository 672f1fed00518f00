import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, parseDocument } from 'yaml';
import { ROOT, useHarness, type Harness } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * Your own agents in Compose: docker-compose.agents.yml, laid over docker-compose.yml, mounts
 * a folder at /agents in the worker service and starts the image (Dockerfile: ENTRYPOINT node
 * bin/baton.js) as `worker --agents /agents/<module>`. Docker is not needed to check what it
 * would run: the files' syntax and what they say, then that command's worker run here on a
 * copy of the container's layout (the mounted module below a node_modules/baton-agents, as the
 * Dockerfile links it), until a run of the mounted `hello` streams. The checks that need
 * docker itself are skipped by name without it.
 */

const read = (p: string) => readFileSync(join(ROOT, p), 'utf8');
const VERSION = JSON.parse(read('package.json')).version as string;
/** Docker with its compose plugin and a daemon that answers. */
const hasDocker = [['compose', 'version'], ['info']].every((args) => spawnSync('docker', args, { stdio: 'ignore', timeout: 20_000 }).status === 0);

/** Compose's variable interpolation: `${NAME:-default}` and `${NAME}`, from `env`. */
function interpolate(text: string, env: Record<string, string | undefined> = {}): string {
  return text.replace(/\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}/g, (_, name: string, fallback?: string) => env[name] || (fallback ?? ''));
}

/** A compose file as Compose reads it: YAML with `<<:` merge keys, its variables interpolated. */
function composeFile(path: string, env: Record<string, string | undefined> = {}) {
  const doc = parseDocument(read(path), { merge: true });
  expect(doc.errors.map((e) => e.message), path).toEqual([]);
  return parseYaml(interpolate(read(path), env), { merge: true });
}

/** The Dockerfile's final stage: its ENTRYPOINT and CMD (exec form) and its RUN lines. */
function imageOf(dockerfile: string) {
  const final = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
  const exec = (instruction: string) => {
    const m = new RegExp(`^${instruction}\\s+(\\[.*\\])\\s*$`, 'm').exec(final);
    return m ? (JSON.parse(m[1]) as string[]) : undefined;
  };
  const workdir = [...final.matchAll(/^WORKDIR\s+(\S+)/gm)].at(-1)?.[1];
  return { entrypoint: exec('ENTRYPOINT'), cmd: exec('CMD'), workdir, runs: [...final.matchAll(/^RUN\s+(.+)$/gm)].map((m) => m[1]) };
}

let h: Harness;
beforeAll(async () => {
  h = await useHarness();
});

describe('your own agents in Compose', () => {
  it('docker-compose.agents.yml mounts a folder at /agents in the worker and loads its module with --agents; the defaults name files that exist', () => {
    const base = composeFile('docker-compose.yml');
    const agents = composeFile('docker-compose.agents.yml');
    // An override of the worker service only: the image, its build and the other services stay the base file's.
    expect(Object.keys(agents.services)).toEqual(['worker']);
    expect(Object.keys(agents.services.worker).sort()).toEqual(['command', 'volumes']);
    expect(agents.services.worker.command).toEqual(['worker', '--agents', '/agents/agents.mjs']);
    expect(agents.services.worker.volumes).toEqual(['./templates/init:/agents:ro']);
    expect(base.services.worker.command).toEqual(['worker']);
    const [source, target, mode] = agents.services.worker.volumes[0].split(':');
    expect(mode).toBe('ro');
    // The module the command names lies in the mounted folder, and the default folder holds it.
    const module = agents.services.worker.command[2] as string;
    expect(module.startsWith(`${target}/`)).toBe(true);
    expect(existsSync(join(resolve(ROOT, source), posix.relative(target, module)))).toBe(true);

    // A folder and module of the user's: both variables reach the command and the mount.
    const mine = composeFile('docker-compose.agents.yml', { BATON_AGENTS_DIR: '../my-agents', BATON_AGENTS_MODULE: 'agents.ts' });
    expect(mine.services.worker.command).toEqual(['worker', '--agents', '/agents/agents.ts']);
    expect(mine.services.worker.volumes).toEqual(['../my-agents:/agents:ro']);
    // The base file's header names the way in.
    expect(read('docker-compose.yml')).toContain('docker compose -f docker-compose.yml -f docker-compose.agents.yml up');
  });

  it('the image runs node bin/baton.js with the compose command, from /app, and links its Baton at /node_modules/baton-agents', () => {
    const image = imageOf(read('Dockerfile'));
    expect(image.entrypoint).toEqual(['node', 'bin/baton.js']);
    expect(image.cmd).toEqual(['api']);
    expect(image.workdir).toBe('/app');
    // Node looks for baton-agents in the node_modules of /agents, then of /: the link must be the latter, to the image's package.
    expect(image.runs).toContain(`mkdir -p /node_modules && ln -s ${image.workdir} /node_modules/baton-agents`);
    const command = [...image.entrypoint!, ...composeFile('docker-compose.agents.yml').services.worker.command];
    expect(command).toEqual(['node', 'bin/baton.js', 'worker', '--agents', '/agents/agents.mjs']);
  });

  it('that command\'s worker, on a copy of the container\'s layout, loads the mounted module and a run of its hello streams', async () => {
    // /node_modules/baton-agents -> the image's Baton (here a stand-in re-exporting this
    // checkout's src/index.ts) and /agents <- the mounted folder, under a temporary root.
    const root = realpathSync(mkdtempSync(join(tmpdir(), 'baton-compose-')));
    track(root, async () => rmSync(root, { recursive: true, force: true }));
    const baton = join(root, 'app');
    mkdirSync(baton);
    writeFileSync(join(baton, 'package.json'), JSON.stringify({ name: 'baton-agents', version: VERSION, type: 'module', exports: { '.': './index.js' } }));
    writeFileSync(join(baton, 'index.js'), `export * from ${JSON.stringify(pathToFileURL(join(ROOT, 'src/index.ts')).href)};\n`);
    mkdirSync(join(root, 'node_modules'));
    symlinkSync(baton, join(root, 'node_modules/baton-agents'));
    const agents = composeFile('docker-compose.agents.yml').services.worker;
    const [source, target] = (agents.volumes[0] as string).split(':');
    cpSync(resolve(ROOT, source), join(root, target), { recursive: true });

    const [command, ...args] = agents.command as string[];
    expect(command).toBe('worker');
    await h.spawn('worker', { args: args.map((a) => (a.startsWith('/agents/') ? join(root, a) : a)) });
    const api = await h.startApi();
    const acme = await h.client(api.url, 'acme');
    const run = await acme.submit('compose-1', 'compose', { agent: 'hello' });
    expect(run.status).toBe(202);
    const sse = await acme.sse(`/runs/${run.body.id}/events`);
    expect(sse.events.filter((e) => e.event === 'token').length).toBeGreaterThanOrEqual(3);
    expect(tokenText(sse.events)).toBe('Hello, compose! Nice to meet you.');
    expect(sse.events.at(-1)?.event).toBe('end');
  }, 120_000);

  it.skipIf(!hasDocker)('(needs docker, its compose plugin and daemon) docker compose config accepts both files, and the built image\'s entry point and command', () => {
    const config = spawnSync('docker', ['compose', '-f', 'docker-compose.yml', '-f', 'docker-compose.agents.yml', 'config', '--format', 'json'], { cwd: ROOT, encoding: 'utf8' });
    expect(config.status, config.stderr).toBe(0);
    const worker = JSON.parse(config.stdout).services.worker;
    expect(worker.command).toEqual(['worker', '--agents', '/agents/agents.mjs']);
    expect(worker.volumes).toEqual([expect.objectContaining({ type: 'bind', source: join(ROOT, 'templates/init'), target: '/agents', read_only: true })]);
    const build = spawnSync('docker', ['build', '-q', '-t', 'baton:compose-test', '.'], { cwd: ROOT, encoding: 'utf8', timeout: 900_000 });
    expect(build.status, build.stderr).toBe(0);
    const inspect = spawnSync('docker', ['image', 'inspect', 'baton:compose-test', '--format', '{{json .Config}}'], { encoding: 'utf8' });
    const cfg = JSON.parse(inspect.stdout) as { Entrypoint: string[]; Cmd: string[]; WorkingDir: string };
    expect([cfg.Entrypoint, cfg.Cmd, cfg.WorkingDir]).toEqual([['node', 'bin/baton.js'], ['api'], '/app']);
    const link = spawnSync('docker', ['run', '--rm', '--entrypoint', 'readlink', 'baton:compose-test', '/node_modules/baton-agents'], { encoding: 'utf8' });
    expect(link.stdout.trim()).toBe('/app');
  }, 900_000);
});
