#!/usr/bin/env node
// The package as a user gets it from npm: one `npm pack`, one `npm install <tarball>` into a
// new project with no TypeScript tooling, then per Node version (`--node <binary>`, repeatable;
// default: the Node running this script):
//   - the README's quickstart runs verbatim (its `<!-- quickstart -->` blocks): `init
//     my-agents` from the package installed globally from the tarball (BATON names that copy;
//     init packs it into the new folder, the registry not having this version), `npm start`
//     there, a key, a streamed run, an approved wait;
//   - plain Node imports `baton-agents` and `baton-agents/client` (consumer.mjs);
//   - `npx baton start` comes up on its own redis-server, and the installed client submits a
//     run and streams it to its end;
//   - `npx baton worker --agents ./agent.mjs` and `--agents ./agent.ts` load their agents, and
//     runs of each stream to their end (the .ts one retries a TransientError on the way);
//   - an Express 5 app mounts createBatonRouter under /agents beside its own routes, with a
//     worker started from code, and a run submitted through /agents/v1/... streams to its end,
//     and the run inspector at /agents/ui lists it in Chromium;
//   - tsc type-checks .ts consumers under moduleResolution nodenext and bundler, and the
//     client alone with DOM types and no Node types (TypeScript from this checkout, never
//     installed into the consumer);
//   - esbuild bundles baton-agents/client for the browser with none of the server packages in it.
// Any failure prints what the failing step saw and exits 1. `npm run smoke -- --node ...`.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const FIXTURES = join(ROOT, 'scripts/package-smoke');
const require = createRequire(import.meta.url);
const { values: args } = parseArgs({ options: { node: { type: 'string', multiple: true }, keep: { type: 'boolean' } } });
const nodes = args.node?.length ? args.node : [process.execPath];
/** Server packages that must never reach a browser bundle of the client. */
const SERVER_PACKAGES = ['ioredis', 'bullmq', 'express', 'openai', 'pino', 'prom-client'];

const started = new Set();
let failed = false;
let passedSteps = 0;

class SmokeError extends Error {}
function check(ok, message, detail = '') {
  if (!ok) throw new SmokeError(detail ? `${message}\n${detail}` : message);
}

/** Runs a command to its end; throws with its output unless it exits 0 within `timeoutMs`. */
function run(cmd, argv, { cwd, env, timeoutMs = 120_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, { cwd, env: env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (b) => { out += b; });
    child.stderr.on('data', (b) => { err += b; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve({ stdout: out, stderr: err });
      else reject(new SmokeError(`${cmd} ${argv.join(' ')} exited ${code ?? signal}${signal === 'SIGKILL' ? ` (killed after ${timeoutMs} ms)` : ''}\n${out}${err}`));
    });
  });
}

/**
 * Starts a long-running command in its own process group (npx runs the bin through a shell,
 * and `baton start` spawns redis-server: stopping the group stops them all) and resolves once
 * its output matches `ready`.
 */
function serve(name, cmd, argv, { cwd, env, ready, timeoutMs = 60_000 }) {
  const child = spawn(cmd, argv, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (b) => { out += b; });
  child.stderr.on('data', (b) => { out += b; });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const handle = {
    name,
    output: () => out,
    // The whole group, not only its leader: npx exits at once on SIGTERM while the `baton`
    // process under it shuts down, and a member left running holds this script's pipes open
    // (so this script would never exit). Past 10 s the group is killed.
    async stop() {
      try { process.kill(-child.pid, 'SIGTERM'); } catch { started.delete(handle); return; }
      const timer = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }, 10_000);
      await exited;
      for (const until = Date.now() + 20_000; groupAlive(child.pid) && Date.now() < until;) await new Promise((r) => setTimeout(r, 100));
      clearTimeout(timer);
      started.delete(handle);
    },
  };
  started.add(handle);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new SmokeError(`${name} did not come up within ${timeoutMs} ms:\n${out}`)), timeoutMs);
    const look = () => {
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ ...handle, match: m });
      }
    };
    child.stdout.on('data', look);
    child.stderr.on('data', look);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new SmokeError(`${name} exited ${code ?? signal} before it was up:\n${out}`));
    });
  });
}

async function step(name, fn) {
  const t = Date.now();
  try {
    const note = await fn();
    passedSteps++;
    console.log(`  ok   ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)${note ? `: ${note}` : ''}`);
  } catch (err) {
    console.error(`  FAIL ${name}: ${err instanceof SmokeError ? err.message : err.stack}`);
    throw err;
  }
}

async function main() {
  const work = mkdtempSync(join(tmpdir(), 'baton-smoke-'));
  const consumer = join(work, 'consumer');
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  let tarball;
  console.log(`package smoke test in ${work}`);
  try {
    await step('npm pack (builds dist/ first)', async () => {
      const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: ROOT, timeoutMs: 180_000 });
      // npm prints the prepack build's output before the JSON.
      const [info] = JSON.parse(stdout.slice(stdout.indexOf('[\n')));
      tarball = join(work, info.filename);
      const files = info.files.map((f) => f.path);
      for (const f of ['bin/baton.js', 'dist/index.js', 'dist/index.d.ts', 'dist/client.js', 'dist/client.d.ts', 'dist/server.js',
        'dist/server.d.ts', 'dist/cli/main.js', 'dist/index.js.map', 'dist/lib/transitions/claim.lua', 'dist/lib/transitions/lib/call.lua',
        'dist/ui/index.html', 'grafana/dashboards/baton.json', 'README.md', 'LICENSE', 'package.json']) {
        check(files.includes(f), `the tarball lacks ${f}`);
      }
      const extra = files.filter((f) => /^(src|test|bench|scripts)\//.test(f) || f.endsWith('.test.ts'));
      check(extra.length === 0, 'the tarball holds sources, tests or scripts', extra.join('\n'));
      return `${info.filename}, ${kb(info.size)} packed, ${kb(info.unpackedSize)} unpacked, ${info.entryCount} files`;
    });

    await step('npm install <tarball> into a new project', async () => {
      mkdirSync(consumer);
      writeFileSync(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2));
      // The host app imports express and prom-client itself; the versions Baton pins keep one copy of each.
      await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball,
        `express@${pkg.dependencies.express}`, `prom-client@${pkg.dependencies['prom-client']}`], { cwd: consumer, timeoutMs: 300_000 });
      check(!existsSync(join(consumer, 'node_modules/typescript')), 'typescript was installed into the consumer');
      check(!existsSync(join(consumer, 'node_modules/baton-agents/src')), 'the installed package carries src/');
      cpSync(FIXTURES, consumer, { recursive: true });
    });

    await step('npm install -g <tarball> (the quickstart\'s BATON names that copy)', async () => {
      await run('npm', ['install', '-g', '--prefix', join(work, 'global'), '--no-audit', '--no-fund', '--prefer-offline', tarball],
        { cwd: work, timeoutMs: 300_000 });
      check(existsSync(join(work, 'global/bin/baton-agents')), 'the global install has no baton-agents command');
      check(existsSync(join(work, 'global/lib/node_modules/baton-agents/bin/baton.js')), 'the global install is not where BATON names it');
    });

    for (const node of nodes) await scenario(node, consumer, work);
  } catch (err) {
    failed = true;
    if (!(err instanceof SmokeError)) console.error(err);
  } finally {
    await Promise.all([...started].map((s) => s.stop()));
    if (failed || args.keep) console.error(`kept ${work} for a look`);
    else rmSync(work, { recursive: true, force: true });
  }
  if (failed) {
    console.error('package smoke test FAILED');
    console.log(`smoke: ${passedSteps} passed, 1 failed`);
    process.exit(1);
  }
  console.log(`package smoke test passed on ${nodes.length} Node version(s)`);
  console.log(`smoke: ${passedSteps} passed, 0 failed`);
}

async function scenario(node, consumer, work) {
  const version = spawnSync(node, ['--version'], { encoding: 'utf8' }).stdout.trim();
  check(/^v\d+\./.test(version), `${node} is not a Node binary`);
  console.log(`node ${version} (${node})`);
  // `npx` and the bin's `#!/usr/bin/env node` find this Node first on PATH.
  const env = {
    ...cleanEnv(), PATH: `${dirname(node)}${delimiter}${process.env.PATH}`,
    LOG_LEVEL: 'warn', PORT: '0', METRICS_PORT: '0', RETRY_BASE_MS: '50', RETRY_MAX_MS: '200',
  };
  // Each version runs `baton start` in a folder of its own: a new .baton/redis, so a new dev key.
  const dir = join(consumer, `run-${version}`);
  mkdirSync(dir);
  const here = { cwd: consumer, env };

  await step('node consumer.mjs imports baton and baton/client', async () => {
    const { stdout } = await run(node, ['consumer.mjs'], { ...here, timeoutMs: 30_000 });
    check(stdout.includes(`consumer ok (node ${version})`), 'consumer.mjs said nothing', stdout);
  });

  await step('the README quickstart, verbatim, in a folder outside the package\'s', async () => {
    const { terminal1, terminal2 } = quickstartBlocks();
    const home = join(work, `quickstart-${version}`);
    mkdirSync(home);
    // As a user with baton-agents installed globally from the tarball: BATON names that copy,
    // and `init` makes the new folder depend on it (packed into the folder while the registry
    // does not have this version).
    const qsEnv = {
      ...cleanEnv(), PATH: `${dirname(node)}${delimiter}${join(work, 'global/bin')}${delimiter}${process.env.PATH}`,
      npm_config_prefix: join(work, 'global'), BATON: join(work, 'global/lib/node_modules/baton-agents'), LOG_LEVEL: 'warn',
    };
    const start = await serve('quickstart terminal 1', 'bash', ['-ec', terminal1], {
      cwd: home, env: qsEnv, ready: /baton is up: API (\S+)/, timeoutMs: 300_000,
    });
    check(existsSync(join(home, 'my-agents/node_modules/baton-agents/package.json')), 'init did not install baton-agents into my-agents');
    const own = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version;
    const dep = JSON.parse(readFileSync(join(home, 'my-agents/package.json'), 'utf8')).dependencies['baton-agents'];
    check(dep === `file:baton-agents-${own}.tgz` || dep === `^${own}`, `init named baton-agents ${dep}`, start.output());
    check(!existsSync(join(home, 'node_modules')), 'the quickstart installed into the folder above my-agents');
    // Terminal 2: every block in one shell, in order, as a person pastes them.
    const { stdout } = await run('bash', ['-ec', terminal2], { cwd: home, env: qsEnv, timeoutMs: 120_000 });
    check(/event: token\ndata: .*Hello,/.test(stdout) && /event: end\n/.test(stdout), 'the hello run did not stream its tokens to its end', stdout);
    check(stdout.includes('"content": "Hello, world! Nice to meet you."'), 'the session history lacks the answer', stdout);
    check(stdout.includes('"key": "wait:approval:1"'), 'the publish run did not list its wait', stdout);
    check(stdout.includes('"Published: Release notes (draft)"'), 'the approved run did not publish', stdout);
    await start.stop();
    check(!existsSync(join(home, 'my-agents/.baton/lock')), 'the start left its lock behind');
    return 'init, start, key, stream, history, wait and approval';
  });

  let api;
  let key;
  let redisUrl;
  await step('npx baton start comes up on its own redis-server', async () => {
    const start = await serve('baton start', 'npx', ['baton', 'start'], { cwd: dir, env, ready: /baton is up: API (\S+)/ });
    api = start.match[1];
    // Its stdout is a pipe here, not a terminal: the key goes to a file only its owner reads.
    const keyFile = /development API key[^\n]* written to (\S+)/.exec(start.output())?.[1];
    check(keyFile, 'baton start named no development key file', start.output());
    check((statSync(keyFile).mode & 0o777) === 0o600, `${keyFile} is readable by others`);
    key = readFileSync(keyFile, 'utf8').trim();
    check(key, 'the development key file is empty');
    redisUrl = readFileSync(join(dir, '.baton/redis.url'), 'utf8').trim();
    // The run inspector ships built: its page and the script it loads are served.
    const page = await fetch(`${api}/ui`);
    const html = await page.text();
    check(page.status === 200 && /<script[^>]+src="\.\/assets\//.test(html), 'GET /ui did not serve the run inspector', `${page.status}\n${html.slice(0, 300)}`);
    // Its files are named relative to the page (a <base href> the API writes), so they load under any mount.
    const script = new URL(/src="(\.\/assets\/[^"]+\.js)"/.exec(html)[1], `${api}/ui/`).href;
    check((await fetch(script)).status === 200, `GET ${script} failed`);
    return `${api}, run inspector at /ui`;
  });

  const submit = async (url, runtime, agent, content, how = 'two-requests') => {
    const { stdout } = await run(node, ['submit.mjs', url, key, 'dev', runtime, agent, content, how], { ...here, timeoutMs: 45_000 });
    return JSON.parse(stdout.trim().split('\n').at(-1));
  };

  await step('the installed client submits a run to baton start and streams it to the end', async () => {
    const r = await submit(api, 'default', 'echo', 'hello from the package');
    check(r.status === 'succeeded' && r.text === 'hello from the package', 'unexpected end', JSON.stringify(r));
  });

  await step('the installed client submits and streams in one request (submitAndStream)', async () => {
    const r = await submit(api, 'default', 'echo', 'one request from the package', 'one-request');
    check(r.status === 'succeeded' && r.text === 'one request from the package', 'unexpected end', JSON.stringify(r));
  });

  const withRedis = { ...env, REDIS_URL: redisUrl };
  await step('npx baton worker --agents ./agent.mjs and --agents ./agent.ts load their agents', async () => {
    const workers = await Promise.all([
      serve('worker (agent.mjs)', 'npx', ['baton', 'worker', '--agents', './agent.mjs'], { ...here, env: { ...withRedis, RUNTIME: 'smoke-mjs' }, ready: /serving runtime/ }),
      serve('worker (agent.ts)', 'npx', ['baton', 'worker', '--agents', './agent.ts'], { ...here, env: { ...withRedis, RUNTIME: 'smoke-ts' }, ready: /serving runtime/ }),
    ]);
    const [mjs, ts] = await Promise.all([
      submit(api, 'smoke-mjs', 'smoke-mjs', 'plain javascript'),
      submit(api, 'smoke-ts', 'smoke-ts', 'typescript'),
    ]);
    check(mjs.status === 'succeeded' && mjs.answer === 'mjs: plain javascript' && mjs.text === mjs.answer, 'agent.mjs run', JSON.stringify(mjs));
    // Attempt 1 threw TransientError: retried, so the worker knew the class the agent imported.
    check(ts.status === 'succeeded' && ts.answer === 'ts: typescript' && ts.text === ts.answer && ts.attempts.join() === '1,2', 'agent.ts run', JSON.stringify(ts));
    await Promise.all(workers.map((w) => w.stop()));
  });

  await step('an Express 5 app serves Baton under /agents beside its own routes; a run streams to the end', async () => {
    const host = await serve('host app', node, ['host-app.mjs'], { ...here, env: { ...withRedis, RUNTIME: 'smoke-host' }, ready: /host app listening on (\S+)/ });
    const url = host.match[1];
    const hello = await fetch(`${url}/hello`);
    check(hello.status === 200 && (await hello.json()).hello === 'from the host app', 'the host app\'s own route');
    const r = await submit(`${url}/agents`, 'smoke-host', 'echo', 'through the mount');
    check(r.status === 'succeeded' && r.text === 'through the mount', 'run through /agents', JSON.stringify(r));
    const metrics = await (await fetch(`${url}/metrics`)).text();
    check(/^host_hello_total 1$/m.test(metrics), 'the host\'s own metric', metrics);
    check(/^baton_runs_submitted_total\{runtime="smoke-host",agent="echo"\} 1$/m.test(metrics), 'Baton\'s metrics in the host registry', metrics);
    check(/^baton_runs_finished_total\{runtime="smoke-host",agent="echo",status="succeeded"\} 1$/m.test(metrics), 'the in-process worker\'s metrics in the host registry', metrics);
    await inspectorShows(`${url}/agents/ui`, key, r.runId);
    await host.stop();
  });

  await step('tsc --noEmit: .ts consumers under nodenext and bundler, the client under DOM types alone', async () => {
    // skipLibCheck: checking every declaration of bullmq, zod and ioredis costs 40 s per run. A
    // broken import in Baton's own declarations would then turn types into `any` silently, so
    // the consumers assert that the types they use are not `any` (types/is-any.ts).
    const tsc = require.resolve('typescript/bin/tsc');
    const typeRoots = join(ROOT, 'node_modules/@types');
    await Promise.all(['nodenext', 'bundler', 'browser'].map((mode) =>
      run(node, [tsc, '-p', `types/tsconfig.${mode}.json`, '--typeRoots', typeRoots], { ...here, timeoutMs: 120_000 })));
  });

  await step('esbuild bundles baton-agents/client for the browser without server packages', async () => {
    // esbuild from this checkout, through its JavaScript API under the Node being tested.
    const esbuild = pathToFileURL(require.resolve('esbuild')).href;
    const meta = join(work, `meta-${version}.json`);
    const out = join(work, `bundle-${version}.js`);
    const bundle = `const { build } = await import(${JSON.stringify(esbuild)});
      const r = await build({ entryPoints: ['browser-entry.mjs'], bundle: true, platform: 'browser', format: 'esm',
        outfile: ${JSON.stringify(out)}, metafile: true, logLevel: 'warning' });
      (await import('node:fs')).writeFileSync(${JSON.stringify(meta)}, JSON.stringify(r.metafile));`;
    await run(node, ['--input-type=module', '-e', bundle], { ...here, timeoutMs: 60_000 });
    const inputs = Object.keys(JSON.parse(readFileSync(meta, 'utf8')).inputs);
    const code = readFileSync(out, 'utf8');
    const leaked = SERVER_PACKAGES.filter((p) => inputs.some((i) => i.includes(`node_modules/${p}/`)) || code.includes(p));
    check(leaked.length === 0, `the browser bundle holds ${leaked.join(', ')}`, inputs.join('\n'));
    check(inputs.some((i) => i.includes('node_modules/baton-agents/dist/client.js')), 'the bundle did not come from the installed package', inputs.join('\n'));
    return `${kb(code.length)}, inputs: ${inputs.map((i) => i.replace(/^.*node_modules\//, '')).join(' ')}`;
  });

  // The next version starts its own; nothing of this one stays behind.
  await Promise.all([...started].map((s) => s.stop()));
}

/**
 * The README's quickstart shell blocks (each follows a `<!-- quickstart: terminal N -->`
 * line), joined per terminal in their order.
 */
function quickstartBlocks() {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const blocks = { terminal1: [], terminal2: [] };
  for (const m of readme.matchAll(/<!-- quickstart: terminal ([12]) -->\n```sh\n([\s\S]*?)```/g)) blocks[`terminal${m[1]}`].push(m[2]);
  check(blocks.terminal1.length === 1 && blocks.terminal2.length >= 4, 'README.md lost its quickstart blocks', JSON.stringify(blocks));
  return { terminal1: blocks.terminal1.join('\n'), terminal2: blocks.terminal2.join('\n') };
}

/**
 * The run inspector at `url` (a prefixed mount) opens in headless Chromium, logs in with
 * `key` through its `#key=` link, and lists the run `runId` (Debian's Chromium, the
 * playwright-core of this checkout: no browser download).
 */
async function inspectorShows(url, key, runId) {
  // playwright-core is CommonJS: its exports come as the module's default.
  const { chromium } = (await import(pathToFileURL(require.resolve('playwright-core')).href)).default;
  const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  check(existsSync(executablePath), `the inspector check needs Chromium at ${executablePath} (Debian: apt-get install -y chromium)`);
  const browser = await chromium.launch({
    executablePath, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  try {
    const page = await browser.newPage();
    const failed = [];
    page.on('response', (res) => { if (res.status() >= 400) failed.push(`${res.status()} ${res.url()}`); });
    await page.goto(`${url}#key=${key}`);
    try {
      await page.getByText(runId).first().waitFor({ timeout: 15_000 });
    } catch {
      throw new SmokeError(`the inspector at ${url} did not list run ${runId}\nfailed requests: ${failed.join(', ') || 'none'}\n${(await page.content()).slice(0, 500)}`);
    }
  } finally {
    await browser.close();
  }
}

/**
 * Whether a process of the group led by `pid` still runs: read from /proc where there is one,
 * so a zombie (it holds no pipe, and no signal moves it) does not count.
 */
function groupAlive(pid) {
  if (!existsSync('/proc/self/stat')) {
    try { process.kill(-pid, 0); return true; } catch { return false; }
  }
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try { stat = readFileSync(`/proc/${entry}/stat`, 'utf8'); } catch { continue; }
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so read after the last ')'.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pid && state !== 'Z') return true;
  }
  return false;
}

/** The environment without what a developer's shell may have set for Baton. */
function cleanEnv() {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (/^(REDIS_URL|BATON_|RUNTIME$|PORT$|HOST$|NODE_OPTIONS$)/.test(k)) delete env[k];
  return env;
}

function kb(bytes) {
  return `${(bytes / 1024).toFixed(1)} kB`;
}

await main();
