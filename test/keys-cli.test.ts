import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { runKeysCommand } from '../src/cli/keys-command.ts';
import { CLI_PROCESS_TIMEOUT_MS, CLI_TEST_TIMEOUT_MS } from './helpers/cli.ts';
import { BIN, useHarness, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';

/**
 * `baton keys create|list|revoke` against a real Redis, used against a real API; and
 * `baton start` making a development key only when no key exists, printing it only on a
 * terminal and otherwise writing it to a file only its owner can read. Each real
 * `baton` process costs seconds of CPU, so the command's other cases run in this process.
 */
let h: Harness;
let url: string;

beforeAll(async () => {
  h = await useHarness();
  url = (await h.startApi()).url;
});

function baton(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const options = { env: { ...process.env, ...h.env, ...env }, timeout: CLI_PROCESS_TIMEOUT_MS };
    execFile(process.execPath, [BIN, ...args], options, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** The keys command in this process, its console output captured. */
async function keysInProcess(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const log = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => { stdout += `${a.join(' ')}\n`; });
  const err = vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => { stderr += `${a.join(' ')}\n`; });
  try {
    return { code: await runKeysCommand(args, h.config), stdout, stderr };
  } finally {
    log.mockRestore();
    err.mockRestore();
  }
}

const runtimesOf = (key: string, scope = 'acme') => call(url, 'GET', `/v1/scopes/${scope}/runtimes`, undefined, { authorization: `Bearer ${key}` });

describe('baton keys', () => {
  it('creates a key that works at once, lists it without the key, and revokes it', async () => {
    const created = await baton(['keys', 'create', '--scope', 'acme', '--role', 'client', '--json']);
    expect(created.code, created.stderr).toBe(0);
    const k = JSON.parse(created.stdout);
    expect(Object.keys(k).sort()).toEqual(['id', 'key', 'role', 'scope']);
    expect(k).toMatchObject({ scope: 'acme', role: 'client' });
    expect(k.key).toMatch(/^bk_[A-Za-z0-9_-]{43}$/);
    expect((await runtimesOf(k.key)).status).toBe(200);
    // A client key: admin routes are 403; another scope's paths are 404.
    expect((await call(url, 'GET', `/v1/scopes/acme/runtimes/${h.runtime}/stats`, undefined, { authorization: `Bearer ${k.key}` })).status).toBe(403);
    expect((await runtimesOf(k.key, 'globex')).status).toBe(404);

    const listed = await keysInProcess(['list', '--scope', 'acme', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const list = JSON.parse(listed.stdout);
    expect(list).toContainEqual({ id: k.id, scope: 'acme', role: 'client', createdAt: expect.any(String) });
    expect(listed.stdout).not.toContain(k.key);
    // Redis holds the key's hash, never the key.
    for (const redisKey of await h.allKeys()) {
      const type = await h.redis.type(redisKey);
      const value = type === 'hash' ? JSON.stringify(await h.redis.hgetall(redisKey)) : type === 'string' ? await h.redis.get(redisKey) : '';
      expect(value ?? '').not.toContain(k.key);
    }

    const human = await keysInProcess(['list', '--scope', 'acme']);
    expect(human.stdout).toContain(k.id);

    const revoked = await baton(['keys', 'revoke', k.id]);
    expect(revoked.code, revoked.stderr).toBe(0);
    const after = await runtimesOf(k.key);
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('UNAUTHENTICATED');
    expect((await keysInProcess(['revoke', k.id])).code).toBe(1);
    expect(JSON.parse((await keysInProcess(['list', '--scope', 'acme', '--json'])).stdout)).not.toContainEqual(expect.objectContaining({ id: k.id }));
  }, CLI_TEST_TIMEOUT_MS);

  it('prints the key once in plain form, and refuses bad arguments before touching Redis', async () => {
    const created = await keysInProcess(['create', '--scope', 'acme', '--role', 'admin']);
    expect(created.code).toBe(0);
    const key = created.stdout.split('\n')[0];
    expect((await call(url, 'GET', `/v1/scopes/acme/runtimes/${h.runtime}/stats`, undefined, { authorization: `Bearer ${key}` })).status).toBe(200);

    const before = (await h.allKeys()).sort();
    for (const args of [
      ['create', '--scope', 'acme', '--role', 'root'],
      ['create', '--scope', 'a{b}', '--role', 'client'],
      ['create', '--role', 'client'],
      ['list'],
      ['revoke'],
      ['rotate'],
    ]) {
      const r = await keysInProcess(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toContain('keys create --scope');
    }
    expect((await h.allKeys()).sort()).toEqual(before);
  });
});

describe('baton keys create --operator', () => {
  it('makes a key bound to no scope, stored hashed: it sets limits, reads no scope, is listed apart, and revoke ends it', async () => {
    const created = await keysInProcess(['create', '--operator', '--json']);
    expect(created.code, created.stderr).toBe(0);
    const k = JSON.parse(created.stdout);
    expect(k).toEqual({ id: expect.stringMatching(/^k[0-9a-f]{12}$/), key: expect.stringMatching(/^bk_[A-Za-z0-9_-]{43}$/), scope: null, role: 'operator' });
    const auth = { authorization: `Bearer ${k.key}` };
    expect((await call(url, 'GET', '/v1/whoami', undefined, auth)).body).toEqual({ scope: null, role: 'operator', keyId: k.id });
    expect((await call(url, 'PUT', '/v1/scopes/acme/limits', { maxActive: 3 }, auth)).status).toBe(200);
    expect((await runtimesOf(k.key)).status).toBe(403);
    // Redis holds the key's hash, never the key; its record has no scope.
    const record = await h.redis.hgetall(h.keys.apiKeyByHash((await h.redis.get(h.keys.apiKeyId(k.id)))!));
    expect(record).toEqual({ id: k.id, role: 'operator', createdAt: expect.any(String), hash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    for (const redisKey of await h.allKeys()) {
      const type = await h.redis.type(redisKey);
      const value = type === 'hash' ? JSON.stringify(await h.redis.hgetall(redisKey)) : type === 'string' ? await h.redis.get(redisKey) : '';
      expect(value ?? '').not.toContain(k.key);
    }

    const listed = JSON.parse((await keysInProcess(['list', '--operator', '--json'])).stdout);
    expect(listed).toContainEqual({ id: k.id, scope: null, role: 'operator', createdAt: expect.any(String) });
    expect((await keysInProcess(['list', '--operator'])).stdout).toMatch(new RegExp(`${k.id}\\s+operator`));
    expect(JSON.parse((await keysInProcess(['list', '--scope', 'acme', '--json'])).stdout)).not.toContainEqual(expect.objectContaining({ id: k.id }));

    expect((await keysInProcess(['revoke', k.id])).code).toBe(0);
    expect((await call(url, 'GET', '/v1/whoami', undefined, auth)).status).toBe(401);
    expect(JSON.parse((await keysInProcess(['list', '--operator', '--json'])).stdout)).not.toContainEqual(expect.objectContaining({ id: k.id }));

    // An operator key has no scope and no scope role to give it.
    const before = (await h.allKeys()).sort();
    for (const args of [['create', '--operator', '--scope', 'acme'], ['create', '--operator', '--role', 'admin'], ['create', '--scope', 'acme', '--role', 'operator']]) {
      const r = await keysInProcess(args);
      expect(r.code, args.join(' ')).toBe(2);
    }
    expect((await h.allKeys()).sort()).toEqual(before);
  });
});

describe('baton start', () => {
  it('makes a dev key when Redis has no key, and only then; off a terminal it goes to a file only its owner can read', async () => {
    // A key space of its own: no key exists there yet. A folder of its own for `.baton/`.
    const prefix = `${h.prefix}dev${randomBytes(2).toString('hex')}`;
    const dir = tempDir();
    const first = await startBaton(prefix, { cwd: dir });
    // Its stdout is a pipe here, as a log file or a container's log is: the key is not in it.
    expect(first.out).not.toMatch(/bk_/);
    const file = join(dir, '.baton', 'dev-key');
    expect(first.out).toContain(`development API key (scope "dev", role admin) written to ${file} (readable only by you`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const key = readFileSync(file, 'utf8').trim();
    expect(first.out).toContain(`run inspector: ${first.url}/ui\n`);
    const auth = { authorization: `Bearer ${key}` };
    const sub = await call(first.url, 'POST', '/v1/scopes/dev/runs', { sessionId: 's1', input: { content: 'hi dev' }, runtime: h.runtime }, auth);
    expect(sub.status).toBe(202);
    expect(sub.body.warnings).toBeUndefined();
    expect((await call(first.url, 'GET', `/v1/scopes/dev/runtimes/${h.runtime}/stats`, undefined, auth)).status).toBe(200);
    await first.stop();

    const second = await startBaton(prefix, { cwd: dir });
    expect(second.out).toContain('API keys exist already');
    expect(second.out).not.toContain('development API key');
    expect(second.out).toContain(`run inspector: ${second.url}/ui\n`);
    expect((await call(second.url, 'GET', '/v1/scopes/dev/runtimes', undefined, auth)).status).toBe(200);
    await second.stop();
  });

  it('on a terminal it shows the dev key once, with the inspector link, and writes no file', async () => {
    const prefix = `${h.prefix}tty${randomBytes(2).toString('hex')}`;
    const dir = tempDir();
    const started = await startBaton(prefix, { cwd: dir, tty: true });
    const m = /development API key \(scope "dev", role admin\), shown only now:\n {2}(\S+)/.exec(started.out);
    expect(m, started.out).not.toBeNull();
    expect(started.out).toContain(`run inspector: ${started.url}/ui#key=${m![1]}`);
    expect(existsSync(join(dir, '.baton', 'dev-key'))).toBe(false);
    expect((await call(started.url, 'GET', '/v1/scopes/dev/runtimes', undefined, { authorization: `Bearer ${m![1]}` })).status).toBe(200);
    await started.stop();
  });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'baton-start-'));
  track(dir, async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * `baton start` against the test Redis with its own key prefix, in `cwd`; with `tty`, under
 * `script`, so its stdout is a terminal. Resolves when it is up.
 */
async function startBaton(prefix: string, o: { cwd: string; tty?: boolean }): Promise<{ url: string; out: string; stop(): Promise<void> }> {
  const command = [process.execPath, BIN, 'start'];
  const options = {
    cwd: o.cwd,
    env: { ...process.env, ...h.env, BATON_KEY_PREFIX: prefix, PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'] as ['ignore', 'pipe', 'pipe'],
  };
  const child = o.tty
    ? spawn('script', ['-qec', command.map((a) => `'${a}'`).join(' '), '/dev/null'], options)
    : spawn(command[0], command.slice(1), options);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  track(child, stop);
  let out = '';
  // A terminal ends its lines with CR LF.
  child.stdout!.on('data', (b) => { out += String(b).replace(/\r/g, ''); });
  child.stderr!.on('data', (b) => { out += b; });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`baton start did not come up:\n${out}`)), 30_000);
    child.stdout!.on('data', () => {
      const m = /baton is up: API (\S+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`baton start exited ${code}:\n${out}`)); });
  });
  return { url, get out() { return out; }, stop };
}
