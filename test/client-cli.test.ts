import { spawn } from 'node:child_process';
import { beforeAll, describe, expect, it } from 'vitest';
import { BIN, useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

let h: Harness;
let apiUrl: string;
let key: string;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker();
  apiUrl = api.url;
  key = await h.key('acme', 'client');
});

/** Runs `baton <args>` with the client environment; resolves with its exit code and output. */
function runCli(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  track(child, async () => { if (child.exitCode === null) child.kill('SIGKILL'); });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b) => { stdout += b; });
  child.stderr.on('data', (b) => { stderr += b; });
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

describe('baton submit / baton tail', () => {
  it('submit --tail prints the tokens then the final status; tail replays a finished run', async () => {
    const env = { BATON_URL: apiUrl, BATON_API_KEY: key, BATON_SCOPE: 'acme' };
    const content = 'hello from the command line';
    const sub = await runCli(['submit', '--tail', '--session', 'cli', '--runtime', h.runtime, content], env);
    expect(sub.stderr).toContain('[succeeded]');
    expect(sub.code).toBe(0);
    expect(sub.stdout).toBe(`${content}\n`);
    const runId = /run (\S+) \(session cli\)/.exec(sub.stderr)?.[1];
    expect(runId).toBeTruthy();

    const [tail, plain] = await Promise.all([
      runCli(['tail', runId!], env),
      runCli(['submit', '--runtime', h.runtime, '--session', 'cli', 'just the id'], env),
    ]);
    expect(tail.code).toBe(0);
    expect(tail.stdout).toBe(`${content}\n`);
    expect(tail.stderr.trim()).toBe('[succeeded]');
    expect(plain.code).toBe(0);
    expect(plain.stdout.trim()).toMatch(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/);
  });

  it('says what is missing and exits 2 without URL, key or scope; 1 with the API error for an unknown run', async () => {
    const [missing, unknown] = await Promise.all([
      runCli(['tail', 'r1'], {}),
      runCli(['tail', 'nope', '--url', apiUrl, '--key', key, '--scope', 'acme'], {}),
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('missing --url/BATON_URL, --key/BATON_API_KEY, --scope/BATON_SCOPE');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('404 RUN_NOT_FOUND');
  });
});
