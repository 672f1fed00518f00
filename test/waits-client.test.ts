import { spawn } from 'node:child_process';
import { beforeAll, describe, expect, it } from 'vitest';
import { BatonApiError, BatonClient, resumeWithToken } from '../src/client.ts';
import { closeWaitFixtureRedis, waitAgents } from './fixtures/wait-agents.ts';
import { CLI_TEST_TIMEOUT_MS } from './helpers/cli.ts';
import { BIN, useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/** The typed client's and the CLI's side of waits: list them, resume, approve, decline, resume by token. */
let h: Harness;
let apiUrl: string;
let key: string;
let baton: BatonClient;

beforeAll(async () => {
  h = await useHarness();
  process.env.REDIS_URL = h.redisUrl;
  process.env.BATON_KEY_PREFIX = h.prefix;
  track(null, closeWaitFixtureRedis);
  apiUrl = (await h.startApi()).url;
  await h.startWorker({ agents: waitAgents });
  key = await h.key('acme', 'client');
  baton = new BatonClient({ url: apiUrl, apiKey: key, scope: 'acme' });
});

async function waiting(agent: string, sessionId: string, content = 'x') {
  const run = await baton.submit({ sessionId, input: { content }, agent, runtime: h.runtime });
  for (let i = 0; i < 300; i++) {
    const waits = await baton.waits(run.id);
    if (waits.length) return { run, waits };
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`run ${run.id} never waited`);
}

async function settled(runId: string) {
  for (let i = 0; i < 300; i++) {
    const r = await baton.get(runId);
    if (['succeeded', 'failed', 'cancelled', 'expired'].includes(r.status)) return r;
    await new Promise((res) => setTimeout(res, 50));
  }
  throw new Error(`run ${runId} did not end`);
}

function runCli(args: string[], stdin?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { PATH: process.env.PATH ?? '', BATON_URL: apiUrl, BATON_API_KEY: key, BATON_SCOPE: 'acme' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  track(child, async () => { if (child.exitCode === null) child.kill('SIGKILL'); });
  child.stdin.end(stdin ?? '');
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b) => { stdout += b; });
  child.stderr.on('data', (b) => { stderr += b; });
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

describe('typed client', () => {
  it('waits(), resume(), approve(), decline(), and resumeWithToken() without a key', async () => {
    const ask = await waiting('fx-ask', 'c-ask');
    expect(ask.waits).toEqual([expect.objectContaining({ key: 'wait:answer:1', kind: 'input', token: expect.any(String) })]);
    const after = await baton.resume(ask.run.id, 'wait:answer:1', { n: 1 });
    expect(after.waits).toBeUndefined();
    expect((await settled(ask.run.id)).result?.answer).toContain('got {"n":1}');
    const again = await baton.resume(ask.run.id, 'wait:answer:1', 2).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(BatonApiError);
    expect(again).toMatchObject({ status: 409, code: 'WAIT_NOT_PENDING' });

    const yes = await waiting('fx-ship', 'c-yes', 'v7');
    await baton.approve(yes.run.id, yes.waits[0].key);
    expect((await settled(yes.run.id)).result?.answer).toBe('shipped v7');
    const no = await waiting('fx-ship', 'c-no', 'v8');
    await baton.decline(no.run.id, no.waits[0].key, 'freeze week');
    expect((await settled(no.run.id)).result?.answer).toBe('not shipped: freeze week');

    const link = await waiting('fx-ship', 'c-link', 'v9');
    expect(await resumeWithToken({ url: apiUrl, token: link.waits[0].token!, value: { approved: true } }))
      .toEqual({ runId: link.run.id, waitKey: 'wait:ship:1', resumed: true });
    expect(await resumeWithToken({ url: apiUrl, token: link.waits[0].token!, value: { approved: true } }).catch((e: unknown) => e))
      .toMatchObject({ status: 409, code: 'WAIT_NOT_PENDING' });
    expect((await settled(link.run.id)).result?.answer).toBe('shipped v9');
  });
});

describe('baton resume / approve / decline', () => {
  it('resume takes the value as an argument or on stdin; approve and decline; a second answer or a refused value exits 1 with the code and fields', async () => {
    const a = await waiting('fx-ask', 'cli-1');
    const r1 = await runCli(['resume', a.run.id, 'wait:answer:1', '{"from":"argv"}']);
    expect(r1.code).toBe(0);
    expect(r1.stdout.trim()).toMatch(new RegExp(`^${a.run.id}: (queued|running|succeeded)$`));
    expect((await settled(a.run.id)).result?.answer).toContain('got {"from":"argv"}');
    const twice = await runCli(['resume', a.run.id, 'wait:answer:1', '1']);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain('409 WAIT_NOT_PENDING');

    const b = await waiting('fx-ask', 'cli-2');
    expect((await runCli(['resume', b.run.id, 'wait:answer:1'], '["from","stdin"]\n')).code).toBe(0);
    expect((await settled(b.run.id)).result?.answer).toContain('got ["from","stdin"]');

    const c = await waiting('fx-ship', 'cli-3', 'v1');
    expect((await runCli(['approve', c.run.id, 'wait:ship:1'])).code).toBe(0);
    expect((await settled(c.run.id)).result?.answer).toBe('shipped v1');
    const d = await waiting('fx-ship', 'cli-4', 'v2');
    expect((await runCli(['decline', d.run.id, 'wait:ship:1', '--reason', 'not today'])).code).toBe(0);
    expect((await settled(d.run.id)).result?.answer).toBe('not shipped: not today');

    // A value the wait's schema refuses: the code, and each failing field with what is wrong with it.
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1 } }, required: ['n'] };
    const e = await baton.submit({ sessionId: 'cli-5', input: { content: 'x' }, agent: 'fx-ask', runtime: h.runtime, metadata: { schema } });
    for (let i = 0; i < 300 && !(await baton.waits(e.id)).length; i++) await new Promise((r) => setTimeout(r, 50));
    const refused = await runCli(['resume', e.id, 'wait:answer:1', '{"n":0}']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("API answered 400 VALIDATION_FAILED: The value does not match the wait's schema.");
    expect(refused.stderr).toMatch(/\n {2}body\.value\.n: must be >= 1\n/);
    expect((await baton.get(e.id)).status).toBe('waiting');

    const bad = await runCli(['resume', d.run.id, 'wait:ship:1', '{not json']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('not valid JSON');
    expect((await runCli(['approve', d.run.id])).code).toBe(2);
  }, CLI_TEST_TIMEOUT_MS);
});
