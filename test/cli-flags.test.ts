import { spawnSync } from 'node:child_process';
import { beforeAll, describe, expect, it } from 'vitest';
import { CLI_PROCESS_TIMEOUT_MS, CLI_TEST_TIMEOUT_MS } from './helpers/cli.ts';
import { BIN, useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/**
 * The flags a newcomer reaches for: `baton worker --runtime --concurrency` and `baton api
 * --port --host`, each the same as its environment variable (the flag wins), listed in
 * --help; anything else is answered with the usage text and exit status 2.
 */
let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

function baton(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { env: { ...process.env, ...h.env }, encoding: 'utf8', timeout: CLI_PROCESS_TIMEOUT_MS });
  return { status: r.status, out: r.stdout, err: r.stderr };
}

describe('baton command-line flags', () => {
  it('lists the flags with the variables they stand for', () => {
    const r = baton(['worker', '--help']);
    expect(r.status).toBe(0);
    for (const line of ['--runtime <id>', 'RUNTIME', '--concurrency <n>', 'WORKER_CONCURRENCY', '--port <n>', 'PORT', '--host <addr>', 'HOST']) {
      expect(r.out).toContain(line);
    }
  }, CLI_TEST_TIMEOUT_MS);

  it('answers an unknown flag, a flag of another command or a stray argument with the usage and exit 2', () => {
    for (const args of [['worker', '--bogus'], ['api', '--runtime', 'x'], ['worker', 'extra'], ['frobnicate']]) {
      const r = baton(args);
      expect(r.status, args.join(' ')).toBe(2);
      expect(r.err, args.join(' ')).toContain('Usage: baton <command>');
    }
  }, CLI_TEST_TIMEOUT_MS);

  it('checks a flag value like its variable', () => {
    const r = baton(['worker', '--concurrency', 'lots']);
    expect(r.status).toBe(2);
    expect(r.err).toContain('WORKER_CONCURRENCY');
  }, CLI_TEST_TIMEOUT_MS);

  it('serves the runtime and concurrency the flags name, over the environment', async () => {
    const runtime = `flag-${h.prefix}`;
    const key = 'bk_cli-flags-test-key-0123456789';
    const env = { BATON_BOOTSTRAP_KEYS: `acme:client:${key}` };
    const api = await h.spawn('api', { env, args: ['--port', '0', '--host', '127.0.0.1'] });
    expect(api.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    await h.spawn('worker', { env, args: ['--runtime', runtime, '--concurrency', '3'] });
    const auth = { authorization: `Bearer ${key}` };
    const rt = await waitFor(async () => {
      const list = (await call(api.url!, 'GET', '/v1/scopes/acme/runtimes', undefined, auth)).body.runtimes as { runtimeId: string; concurrency: number }[];
      return list.find((r) => r.runtimeId === runtime);
    }, 15_000, 'the worker to register its runtime');
    expect(rt.concurrency).toBe(3);
    // The environment's RUNTIME got nothing: the flag won.
    const sub = await call(api.url!, 'POST', '/v1/scopes/acme/runs', { sessionId: 'f1', input: { content: 'via flags' }, runtime }, auth);
    expect(sub.status).toBe(202);
    await waitFor(async () => (await call(api.url!, 'GET', `/v1/scopes/acme/runs/${sub.body.id}`, undefined, auth)).body.status === 'succeeded', 15_000, 'the run');
  }, CLI_TEST_TIMEOUT_MS);
});
