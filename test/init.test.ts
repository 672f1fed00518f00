import { spawn, spawnSync } from 'node:child_process';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { tokenText } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * `baton init <dir>` makes a folder for agent modules outside this package. Its agents.mjs
 * must work as the README's quickstart uses it: `hello` streams word by word, `publish` waits
 * on `wait:approval:1` and publishes its memoized draft. The folder's `baton-agents` here is a
 * stand-in package whose entry re-exports this checkout's src/index.ts (the real package's
 * entry is dist/index.js, built from the same sources; the package smoke test installs the
 * packed tarball instead). `npm install` puts it in place from a local folder, offline.
 */

const VERSION = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

function tempDir(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'baton-init-')));
  track(dir, async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function init(cwd: string, args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [BIN, 'init', ...args], { cwd, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The stand-in `baton-agents`: this checkout's SDK from its sources, and nothing to install. */
function standInPackage(dir: string): string {
  const pkg = join(dir, 'baton-agents-src');
  mkdirSync(pkg);
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'baton-agents', version: VERSION, type: 'module', exports: { '.': './index.js' } }));
  writeFileSync(join(pkg, 'index.js'), `export * from ${JSON.stringify(pathToFileURL(join(ROOT, 'src/index.ts')).href)};\n`);
  return pkg;
}

describe('baton init', () => {
  it('makes the folder: package.json named after it, agents.mjs, .gitignore, README.md; --no-install runs nothing', () => {
    const dir = tempDir();
    const r = init(dir, ['My Agents', '--no-install']);
    expect(r.code, r.stderr).toBe(0);
    const folder = join(dir, 'My Agents');
    expect(readdirSync(folder).sort()).toEqual(['.gitignore', 'README.md', 'agents.mjs', 'package.json']);
    expect(JSON.parse(readFileSync(join(folder, 'package.json'), 'utf8'))).toEqual({
      name: 'my-agents',
      version: '0.1.0',
      private: true,
      type: 'module',
      scripts: { start: 'baton start --agents ./agents.mjs', worker: 'baton worker --agents ./agents.mjs' },
      dependencies: { 'baton-agents': `^${VERSION}` },
    });
    expect(readFileSync(join(folder, '.gitignore'), 'utf8')).toBe('node_modules/\n.baton/\n');
    expect(readFileSync(join(folder, 'agents.mjs'), 'utf8')).toBe(readFileSync(join(ROOT, 'templates/init/agents.mjs'), 'utf8'));
    expect(readFileSync(join(folder, 'README.md'), 'utf8')).toMatch(/^# my-agents\n/);
    expect(r.stdout).toContain('next:\n  cd My Agents\n  npm install\n  npm start\n');
  });

  it('refuses a folder that is not empty (exit 2, nothing written); --package and BATON_INIT_PACKAGE name the dependency', () => {
    const dir = tempDir();
    mkdirSync(join(dir, 'taken'));
    writeFileSync(join(dir, 'taken', 'notes.txt'), 'mine');
    const refused = init(dir, ['taken', '--no-install']);
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim()).toBe(`${join(dir, 'taken')} is not empty: init makes a new folder; name one, e.g. baton init my-agents`);
    expect(readdirSync(join(dir, 'taken'))).toEqual(['notes.txt']);
    expect(init(dir, ['a', 'b']).code).toBe(2);
    expect(init(dir, ['--nope']).code).toBe(2);

    const dep = (name: string) => JSON.parse(readFileSync(join(dir, name, 'package.json'), 'utf8')).dependencies['baton-agents'];
    // A local tarball becomes an absolute file: spec (the new folder is elsewhere); a git URL stays as it is.
    expect(init(dir, ['t', '--no-install', '--package', './baton-agents-0.1.0.tgz']).code).toBe(0);
    expect(dep('t')).toBe(`file:${join(dir, 'baton-agents-0.1.0.tgz')}`);
    expect(init(dir, ['g', '--no-install'], { BATON_INIT_PACKAGE: 'git+https://example.com/baton.git#main' }).code).toBe(0);
    expect(dep('g')).toBe('git+https://example.com/baton.git#main');
    // The flag wins over the environment.
    expect(init(dir, ['f', '--no-install', '--package', '0.1.x'], { BATON_INIT_PACKAGE: 'latest' }).code).toBe(0);
    expect(dep('f')).toBe('0.1.x');
  });

  it('the folder\'s agents work: hello streams word by word, publish waits for wait:approval:1 and publishes its draft', async () => {
    const dir = tempDir();
    const pkg = standInPackage(dir);
    const r = init(dir, ['my-agents', '--package', pkg]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const folder = join(dir, 'my-agents');
    // npm install put the dependency in place (a local folder is linked).
    expect(lstatSync(join(folder, 'node_modules', 'baton-agents')).isSymbolicLink()).toBe(true);

    // `npm start` is `baton start --agents ./agents.mjs`; here against the test Redis, in the folder.
    const child = spawn(process.execPath, [BIN, 'start', '--agents', './agents.mjs'], { cwd: folder, env: { ...process.env, ...h.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
    track(child, async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    });
    let out = '';
    child.stdout.on('data', (b) => { out += b; });
    child.stderr.on('data', (b) => { out += b; });
    await waitFor(() => out.includes('baton is up') || child.exitCode !== null, 30_000, 'baton start to come up');
    const m = /baton is up: API (\S+) .*agents: ([^)]*)\)/.exec(out);
    expect(m, out).not.toBeNull();
    expect(m![2].split(', ')).toEqual(expect.arrayContaining(['hello', 'publish']));
    const acme = await h.client(m![1], 'acme');

    const hello = await acme.submit('s1', 'world', { agent: 'hello' });
    expect(hello.status).toBe(202);
    const sse = await acme.sse(`/runs/${hello.body.id}/events`);
    const tokens = sse.events.filter((e) => e.event === 'token');
    expect(tokenText(sse.events)).toBe('Hello, world! Nice to meet you.');
    // Word by word, 50 ms apart: several token events, not one.
    expect(tokens.length).toBeGreaterThanOrEqual(3);
    expect((await acme.waitStatus(hello.body.id, ['succeeded'])).result.answer).toBe('Hello, world! Nice to meet you.');

    const publish = async (sessionId: string, approved: unknown) => {
      const sub = await acme.submit(sessionId, 'Release notes', { agent: 'publish' });
      expect(sub.status).toBe(202);
      const waiting = await acme.waitStatus(sub.body.id, ['waiting']);
      expect(waiting.waits).toEqual([expect.objectContaining({ key: 'wait:approval:1', prompt: 'Publish "Release notes (draft)"?' })]);
      // The schema refuses anything but { approved: boolean }.
      expect((await acme.post(`/runs/${sub.body.id}/waits/wait:approval:1`, { value: { approved: 'yes' } })).status).toBe(400);
      expect((await acme.post(`/runs/${sub.body.id}/waits/wait:approval:1`, { value: { approved } })).status).toBeLessThan(300);
      return (await acme.waitStatus(sub.body.id, ['succeeded', 'failed'])).result?.answer;
    };
    expect(await publish('s2', true)).toBe('Published: Release notes (draft)');
    expect(await publish('s3', false)).toBe('Not published');

    child.kill('SIGTERM');
    expect(await exited, out).toBe(0);
  });
});
