import { beforeAll, describe, expect, it } from 'vitest';
import { follow, type Sink } from '../src/cli/follow.ts';
import { BatonClient } from '../src/client.ts';
import { defineAgent, TransientError } from '../src/index.ts';
import { CLI_TEST_TIMEOUT_MS, runBaton } from './helpers/cli.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/** Streams a draft and fails on its first attempt; streams the final answer on the second. */
const redo = defineAgent({
  name: 'redo',
  async run(ctx) {
    if (ctx.attempt === 1) {
      ctx.emit('a first draft');
      throw new TransientError('provider hiccup');
    }
    ctx.emit('the final ');
    ctx.emit('answer');
    return 'the final answer';
  },
});

/** Returns its answer without streaming it. */
const shout = defineAgent({ name: 'shout', async run(ctx) { return ctx.input.content.toUpperCase(); } });

/**
 * Says something, waits for a name, then says more. Going on after the wait it runs from its
 * start again, so its stream holds the first words twice: once per side of the wait.
 */
const asker = defineAgent({
  name: 'asker',
  async run(ctx) {
    ctx.emit('Who is there? ');
    const name = await ctx.waitFor<string>('name');
    ctx.emit(`Hello, ${name}.`);
    return `Who is there? Hello, ${name}.`;
  },
});

let h: Harness;
let apiUrl: string;
let key: string;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  await h.startWorker({ agents: [redo, shout, asker] });
  apiUrl = api.url;
  key = await h.key('acme', 'client');
});

const runCli = runBaton;

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
  }, CLI_TEST_TIMEOUT_MS);

  it('says what is missing and exits 2 without URL, key or scope; 1 with the API error for an unknown run', async () => {
    const [missing, unknown] = await Promise.all([
      runCli(['tail', 'r1'], {}),
      runCli(['tail', 'nope', '--url', apiUrl, '--key', key, '--scope', 'acme'], {}),
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('missing --url/BATON_URL, --key/BATON_API_KEY, --scope/BATON_SCOPE');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('404 RUN_NOT_FOUND');
  }, CLI_TEST_TIMEOUT_MS);
});

/** An output that records what is written to it; `isTTY` makes it a terminal. */
function sink(isTTY: boolean): Sink & { text: string } {
  return { isTTY, text: '', write(t: string) { this.text += t; return true; } };
}

describe('what submit --tail writes', () => {
  const env = () => ({ BATON_URL: apiUrl, BATON_API_KEY: key, BATON_SCOPE: 'acme' });

  it('to a pipe: the final answer only, even when an attempt restarted; an answer that streamed nothing too', async () => {
    const [retried, quiet] = await Promise.all([
      runCli(['submit', '--tail', '--agent', 'redo', '--runtime', h.runtime, 'go'], env()),
      runCli(['submit', '--tail', '--agent', 'shout', '--runtime', h.runtime, 'hello'], env()),
    ]);
    expect(retried.code).toBe(0);
    expect(retried.stdout).toBe('the final answer\n');
    expect(retried.stderr).toContain('[retrying: provider hiccup]');
    expect(retried.stderr).toContain('[succeeded]');
    expect(quiet.code).toBe(0);
    expect(quiet.stdout).toBe('HELLO\n');
  }, CLI_TEST_TIMEOUT_MS);

  it('to a terminal: a retry restarts the answer, said on stderr; the answer streamed is the final one', async () => {
    const c = new BatonClient({ url: apiUrl, apiKey: key, scope: 'acme' });
    const run = await c.submit({ sessionId: 'tty-redo', input: { content: 'go' }, agent: 'redo', runtime: h.runtime });
    const out = sink(true);
    const err = sink(true);
    expect(await follow(c, run.id, c.stream(run.id), { out, err })).toBe(0);
    expect(out.text).toBe('a first draft\nthe final answer\n');
    expect(err.text).toBe('[retrying: provider hiccup]\n[attempt 2/3: the answer restarts]\n[succeeded]\n');
  });

  it('to a terminal: going on after a wait is no restart, and what was said before it is not shown twice', async () => {
    const c = new BatonClient({ url: apiUrl, apiKey: key, scope: 'acme' });
    const run = await c.submit({ sessionId: 'tty-asker', input: { content: 'x' }, agent: 'asker', runtime: h.runtime });
    const out = sink(true);
    const err = sink(true);
    const done = follow(c, run.id, c.stream(run.id), { out, err });
    await waitFor(async () => (await c.waits(run.id)).length > 0, 15_000, 'the wait');
    await c.resume(run.id, 'wait:name:1', 'Ada');
    expect(await done).toBe(0);
    // The stream said "Who is there? " twice; the terminal shows it once.
    expect(out.text).toBe('Who is there? \nHello, Ada.\n');
    expect(err.text).toBe('[waiting on wait:name:1 (input)]\n[resumed: attempt 1/3 goes on]\n[succeeded]\n');
  });

  it('to a terminal: an answer that streamed nothing is shown at the end', async () => {
    const c = new BatonClient({ url: apiUrl, apiKey: key, scope: 'acme' });
    const { runId, events } = await c.submitAndStream({ sessionId: 'tty-shout', input: { content: 'hey' }, agent: 'shout', runtime: h.runtime });
    const out = sink(true);
    const err = sink(true);
    expect(await follow(c, runId, events, { out, err })).toBe(0);
    expect([out.text, err.text]).toEqual(['HEY\n', '[succeeded]\n']);
  });
});
