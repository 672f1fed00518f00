import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
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
 * on `wait:approval:1` and publishes its memoized draft. The folder's `baton-agents` depends
 * on the copy init runs from: this checkout (linked), or an installed copy (by version when a
 * registry, here a server of the test's own, has it, else packed into the folder). Some tests
 * use a stand-in package whose entry re-exports this checkout's src/index.ts (the real
 * package's entry is dist/index.js, built from the same sources; the package smoke test
 * installs the packed tarball instead). The README's quickstart runs as written, from a
 * folder outside the checkout, through this checkout's bin/baton.js.
 */

const VERSION = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
/** This checkout, as init names it in a file: dependency (no trailing slash). */
const CHECKOUT = ROOT.replace(/\/$/, '');
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
      scripts: { start: 'baton start --watch --agents ./agents.mjs', worker: 'baton worker --agents ./agents.mjs' },
      // Run from this checkout: a link to it, whatever the registry holds.
      dependencies: { 'baton-agents': `file:${CHECKOUT}` },
    });
    expect(readFileSync(join(folder, '.gitignore'), 'utf8')).toBe('node_modules/\n.baton/\n');
    expect(readFileSync(join(folder, 'agents.mjs'), 'utf8')).toBe(readFileSync(join(ROOT, 'templates/init/agents.mjs'), 'utf8'));
    expect(readFileSync(join(folder, 'README.md'), 'utf8')).toMatch(/^# my-agents\n/);
    expect(r.stdout).toContain(`baton-agents: file:${CHECKOUT}, linked to this checkout of Baton`);
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

    // `npm start` is `baton start --watch --agents ./agents.mjs`; here against the test Redis, in the folder.
    const child = spawn(process.execPath, [BIN, 'start', '--watch', '--agents', './agents.mjs'], { cwd: folder, env: { ...process.env, ...h.env }, stdio: ['ignore', 'pipe', 'pipe'] });
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

  it('from an installed copy: ^<version> when the registry has that version, else the copy packed into the folder, which installs it', async () => {
    const dir = tempDir();
    // An installed copy: no src/, its own templates; its entry is the stand-in's.
    const installed = join(dir, 'installed');
    cpSync(standInPackage(dir), installed, { recursive: true });
    cpSync(join(ROOT, 'templates'), join(installed, 'templates'), { recursive: true });

    // A registry of the test's own: it has baton-agents at the versions in `published`.
    let published: string[] = [];
    let asked = 0;
    const registry = createHttpServer((req, res) => {
      asked += 1;
      if (req.url !== '/baton-agents' || published.length === 0) {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"Not found"}');
        return;
      }
      const versions = Object.fromEntries(published.map((v) => [v, { name: 'baton-agents', version: v, dist: { tarball: `http://127.0.0.1/baton-agents-${v}.tgz` } }]));
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ name: 'baton-agents', 'dist-tags': { latest: published.at(-1) }, versions }));
    });
    await new Promise<void>((res) => registry.listen(0, '127.0.0.1', res));
    track(registry, () => new Promise((res) => registry.close(res)));
    const env = {
      ...cleanEnv(), INIT_FROM: installed,
      npm_config_registry: `http://127.0.0.1:${(registry.address() as AddressInfo).port}/`, npm_config_cache: join(dir, 'npm-cache'),
    };
    const initFrom = (args: string[]) => runAsync(process.execPath, [join(ROOT, 'test/helpers/init-from.mjs'), ...args], { cwd: dir, env });
    const dep = (name: string) => JSON.parse(readFileSync(join(dir, name, 'package.json'), 'utf8')).dependencies['baton-agents'];

    // Not on the registry (a tarball's install): packed into the folder, named relative to it.
    const tarball = `baton-agents-${VERSION}.tgz`;
    const packed = await initFrom(['packed']);
    expect(packed.code, packed.stdout + packed.stderr).toBe(0);
    expect(asked).toBeGreaterThanOrEqual(1);
    expect(packed.stdout).toContain(`baton-agents: file:${tarball}, this installed copy packed into the folder (the npm registry does not have this version)`);
    expect(dep('packed')).toBe(`file:${tarball}`);
    expect(readdirSync(join(dir, 'packed')).sort()).toEqual(['.gitignore', 'README.md', 'agents.mjs', tarball, 'node_modules', 'package-lock.json', 'package.json']);
    // Installed from the folder's own tarball: a copy, not a link, so the folder stands alone.
    expect(lstatSync(join(dir, 'packed/node_modules/baton-agents')).isDirectory()).toBe(true);
    expect(readFileSync(join(dir, 'packed/node_modules/baton-agents/index.js'), 'utf8')).toBe(readFileSync(join(installed, 'index.js'), 'utf8'));

    // Another version on the registry: still packed. This one: by version.
    published = ['0.0.1'];
    expect(await initFrom(['other', '--no-install']).then((r) => r.code)).toBe(0);
    expect(dep('other')).toBe(`file:${tarball}`);
    published = ['0.0.1', VERSION];
    const fromRegistry = await initFrom(['registry', '--no-install']);
    expect(fromRegistry.code, fromRegistry.stderr).toBe(0);
    expect(fromRegistry.stdout).toContain(`baton-agents: ^${VERSION}, from the npm registry`);
    expect(dep('registry')).toBe(`^${VERSION}`);
    expect(readdirSync(join(dir, 'registry')).sort()).toEqual(['.gitignore', 'README.md', 'agents.mjs', 'package.json']);
  }, 120_000);

  it('the README\'s quickstart, as written, in a folder outside the checkout: init from this checkout, npm start, a key, hello streamed, an approval', async () => {
    const { terminal1, terminal2 } = quickstartBlocks();
    const home = tempDir();
    expect(home.startsWith(CHECKOUT)).toBe(false);
    // BATON names the checkout, as the README asks; PORT a free port, as it shows (never 3000 here).
    const env = { ...cleanEnv(), BATON: CHECKOUT, PORT: String(await freePort()), LOG_LEVEL: 'warn' };
    const start = spawn('bash', ['-ec', terminal1], { cwd: home, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const exited = new Promise<number | null>((res) => start.once('exit', (code) => res(code)));
    // Ctrl-C reaches the whole group (bash, npm, baton start); baton start then stops its redis-server.
    const stop = async () => {
      if (groupAlive(start.pid!)) process.kill(-start.pid!, 'SIGINT');
      await exited;
      await waitFor(() => !groupAlive(start.pid!), 30_000, 'the quickstart\'s npm start to stop');
    };
    track(start, stop);
    let out = '';
    start.stdout.on('data', (b) => { out += b; });
    start.stderr.on('data', (b) => { out += b; });
    // The first command may build this checkout's dist/ (bin/baton.js builds it when stale).
    await waitFor(() => /baton is up: API \S+/.test(out) || start.exitCode !== null, 180_000, 'the quickstart\'s npm start to come up');
    expect(out, out).toMatch(new RegExp(`baton is up: API http://127\\.0\\.0\\.1:${env.PORT} `));
    expect(out).toContain(`baton-agents: file:${CHECKOUT}, linked to this checkout of Baton`);
    const folder = join(home, 'my-agents');
    expect(JSON.parse(readFileSync(join(folder, 'package.json'), 'utf8')).dependencies['baton-agents']).toBe(`file:${CHECKOUT}`);
    expect(realpathSync(join(folder, 'node_modules/baton-agents'))).toBe(realpathSync(CHECKOUT));
    expect(existsSync(join(home, 'node_modules'))).toBe(false);

    // Terminal 2: every block in one shell, in order, as a person pastes them.
    const t2 = await runAsync('bash', ['-ec', terminal2], { cwd: home, env, timeoutMs: 120_000 });
    expect(t2.code, t2.stdout + t2.stderr).toBe(0);
    // The hello run's stream: its tokens word by word, then the end event.
    const tokens = [...t2.stdout.matchAll(/^event: token\ndata: (.*)$/gm)].map((m) => JSON.parse(m[1]).text as string);
    expect(tokens.length).toBeGreaterThanOrEqual(3);
    expect(tokens.join('')).toBe('Hello, world! Nice to meet you.');
    expect(t2.stdout).toMatch(/^event: end\n/m);
    expect(t2.stdout).toContain('"content": "Hello, world! Nice to meet you."');
    expect(t2.stdout).toContain('"key": "wait:approval:1"');
    expect(t2.stdout).toContain('"Published: Release notes (draft)"');

    await stop();
    expect(existsSync(join(folder, '.baton/lock')), out).toBe(false);
  }, 300_000);
});

/** The README's quickstart shell blocks (each after a `<!-- quickstart: terminal N -->` line), joined per terminal in order. */
function quickstartBlocks(): { terminal1: string; terminal2: string } {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const blocks: Record<string, string[]> = { terminal1: [], terminal2: [] };
  for (const m of readme.matchAll(/<!-- quickstart: terminal ([12]) -->\n```sh\n([\s\S]*?)```/g)) blocks[`terminal${m[1]}`].push(m[2]);
  expect(blocks.terminal1.length).toBe(1);
  expect(blocks.terminal2.length).toBeGreaterThanOrEqual(4);
  return { terminal1: blocks.terminal1.join('\n'), terminal2: blocks.terminal2.join('\n') };
}

/** The environment without what a developer's shell or the test run may have set for Baton. */
function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^(REDIS_URL|BATON_|RUNTIME$|PORT$|HOST$|METRICS_PORT$|NODE_OPTIONS$)/.test(k)) env[k] = v;
  }
  return env;
}

function runAsync(cmd: string, args: string[], opts: { cwd: string; env: Record<string, string>; timeoutMs?: number }) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b) => { stdout += b; });
    child.stderr.on('data', (b) => { stderr += b; });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Whether a process of the group led by `pid` is still there. */
function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((res) => srv.listen(0, '127.0.0.1', res));
  const { port } = srv.address() as AddressInfo;
  await new Promise((res) => srv.close(res));
  return port;
}
