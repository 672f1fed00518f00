import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BIN, ROOT, waitFor } from './helpers/harness.ts';
import { call, readSse, tokenText } from './helpers/http.ts';
import { track } from './helpers/resources.ts';
import { redisServersIn, spawnStart, startedApi } from './helpers/start.ts';

/**
 * `baton start --watch` in a folder outside the checkout, as `npm start` of a `baton init`
 * folder runs it: a save of the agent module, or of a file it imports, starts a new worker
 * process with the new code, and the previous one drains. A run mid-answer at the reload ends
 * on the old worker with the old code (the grace outlasts it, so it is not handed over); a
 * run submitted after the reload gets the new code; a save that does not load leaves the old
 * worker serving and says why in one log line. Every run ends once, none runs twice: the agent
 * counts its executions in a file. Runs wait on gate files the test writes, so nothing here
 * depends on how long anything takes.
 */

const KEY = `bk_watch-${randomBytes(12).toString('hex')}`;
const AUTH = { authorization: `Bearer ${KEY}` };

const AGENTS = `import { appendFileSync, existsSync } from 'node:fs';
import { defineAgent } from 'baton-agents';
import { reply } from './reply.mjs';

// Counts each execution and each run of its one step, streams a token, then waits mid-answer
// until gates/<input> exists.
export const slow = defineAgent({
  name: 'slow',
  async run(ctx) {
    appendFileSync(new URL('runs.log', import.meta.url), ctx.runId + '\\n');
    await ctx.step('think', async () => {
      appendFileSync(new URL('steps.log', import.meta.url), ctx.runId + '\\n');
      ctx.emit('thinking... ');
    });
    while (!existsSync(new URL('gates/' + ctx.input.content, import.meta.url))) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return reply(ctx.input.content);
  },
});
`;

const reply = (version: string) => `export const reply = (content) => '${version}: ' + content;\n`;

/** A folder like `baton init`'s: baton-agents (a stand-in for this checkout's SDK), agents.mjs, reply.mjs. */
function agentsFolder(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'baton-watch-')));
  track(dir, async () => {
    // A failing test leaves no redis-server behind, then no folder.
    for (const pid of redisServersIn(join(dir, '.baton', 'redis'))) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const pkg = join(dir, 'node_modules', 'baton-agents');
  mkdirSync(pkg, { recursive: true });
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'baton-agents', type: 'module', exports: { '.': './index.js' } }));
  writeFileSync(join(pkg, 'index.js'), `export * from ${JSON.stringify(pathToFileURL(join(ROOT, 'src/index.ts')).href)};\n`);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'my-agents', private: true, type: 'module' }));
  writeFileSync(join(dir, 'agents.mjs'), AGENTS);
  writeFileSync(join(dir, 'reply.mjs'), reply('v1'));
  mkdirSync(join(dir, 'gates'));
  return dir;
}

type LogLine = { msg: string; [k: string]: any };

/** The JSON lines of the output (the banner for a person aside). */
const logLines = (out: string): LogLine[] =>
  out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as LogLine);

/** `baton start --watch --agents ./agents.mjs` in a new agents folder, and what a test does with it. */
async function watchedStart(graceMs: number) {
  const dir = agentsFolder();
  const s = spawnStart(dir, { LOG_LEVEL: 'info', SHUTDOWN_GRACE_MS: String(graceMs), BATON_BOOTSTRAP_KEYS: `acme:client:${KEY}` }, ['--watch', '--agents', './agents.mjs']);
  const logs = () => logLines(s.out());
  // Worker processes have a process group of their own: a failing test kills them itself.
  track(s, async () => {
    for (const pid of logs().flatMap((l) => (l.msg === 'worker started' ? [l.pid as number] : []))) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    }
  });
  const api = await startedApi(s);
  const lines = (msg: string) => logs().filter((l) => l.msg === msg);
  const get = async (runId: string) => (await call(api, 'GET', `/v1/scopes/acme/runs/${runId}`, undefined, AUTH)).body;
  return {
    dir, s, api, logs, lines,
    async submit(content: string): Promise<string> {
      const r = await call(api, 'POST', '/v1/scopes/acme/runs', { sessionId: `s-${content}`, agent: 'slow', input: { content } }, AUTH);
      expect(r.status, JSON.stringify(r.body)).toBe(202);
      return r.body.id as string;
    },
    running: (runId: string) => waitFor(async () => (await get(runId)).status === 'running', 60_000, `run ${runId} to be running`),
    release: (content: string) => writeFileSync(join(dir, 'gates', content), ''),
    ended: (runId: string) => waitFor(async () => {
      const run = await get(runId);
      return ['succeeded', 'failed', 'cancelled', 'blocked'].includes(run.status) ? run : undefined;
    }, 60_000, `run ${runId} to end`),
    reloaded: (n: number) => waitFor(() => lines('agent modules reloaded').length >= n, 120_000, `reload ${n}:\n${s.out()}`),
    /** Each line of one of the agent's count files. */
    counted: (file: 'runs.log' | 'steps.log') => readFileSync(join(dir, file), 'utf8').trim().split('\n'),
  };
}

describe('baton start --watch', () => {
  it('a save reloads the agents mid-run: the run in flight ends once with the old code, later runs get the new code, a save that does not load keeps the old worker serving', async () => {
    const { dir, s, api, lines, logs, submit, running, release, ended, reloaded, counted } = await watchedStart(120_000);
    const watching = lines('watching agent modules: a save reloads them');
    expect(watching, s.out()).toHaveLength(1);
    expect(watching[0].files).toEqual(['agents.mjs', 'reply.mjs']);

    // Mid-answer on generation 1: it streamed its first token and waits for its gate.
    const inFlight = await submit('a');
    const stream = readSse(`${api}/v1/scopes/acme/runs/${inFlight}/events`, { headers: AUTH });
    await running(inFlight);

    // A burst of saves of the imported file is one reload.
    for (const v of ['v2-draft', 'v2-almost', 'v2']) writeFileSync(join(dir, 'reply.mjs'), reply(v));
    await reloaded(1);
    const after = await submit('b');
    release('b');
    expect(await ended(after)).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'v2: b' } });

    // The run in flight still holds generation 1, which drains; released, it answers with the old code.
    release('a');
    expect(await ended(inFlight)).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'v1: a' } });
    const { events } = await stream;
    expect(tokenText(events)).toBe('thinking... ');
    expect(events.filter((e) => e.event === 'end')).toEqual([expect.objectContaining({ data: expect.objectContaining({ status: 'succeeded' }) })]);
    await waitFor(() => logs().some((l) => l.msg === 'worker stopped' && l.generation === 1), 60_000, `generation 1 to stop:\n${s.out()}`);

    // A save that does not parse: one error line naming the place; generation 2 keeps serving.
    writeFileSync(join(dir, 'reply.mjs'), "export const reply = (content) => 'v3: ' + ;\n");
    await waitFor(() => lines('agent modules failed to load; the running worker keeps serving').length === 1, 120_000, `the failed load:\n${s.out()}`);
    const failed = lines('agent modules failed to load; the running worker keeps serving')[0];
    expect(failed).toMatchObject({ generation: 3, changed: ['reply.mjs'] });
    expect(failed.error).toContain(`${join(dir, 'reply.mjs')}:1`);
    expect(failed.error).toContain('SyntaxError');
    release('c');
    const kept = await submit('c');
    expect(await ended(kept)).toMatchObject({ status: 'succeeded', result: { answer: 'v2: c' } });

    // The next save loads.
    writeFileSync(join(dir, 'reply.mjs'), reply('v3'));
    await reloaded(2);
    release('d');
    const last = await submit('d');
    expect(await ended(last)).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'v3: d' } });

    // Every run executed once: none lost, none run twice.
    const executions = counted('runs.log').sort();
    expect(executions).toEqual([inFlight, after, kept, last].sort());
    expect(counted('steps.log').sort()).toEqual(executions);

    const reloads = lines('agent modules reloaded');
    expect(reloads.map((l) => [l.generation, l.changed])).toEqual([[2, ['reply.mjs']], [4, ['reply.mjs']]]);
    expect(reloads[1].previousWorkerPid).toBe(reloads[0].workerPid);
    expect(reloads[1].agents).toEqual(expect.arrayContaining(['slow']));

    // Ctrl-C: the serving generation drains and every worker process is gone.
    process.kill(-s.child.pid!, 'SIGINT');
    expect(await s.exited, s.out()).toBe(0);
    const workerPids = [watching[0].workerPid, ...reloads.map((l) => l.workerPid)];
    for (const pid of workerPids) expect(() => process.kill(pid, 0), `worker ${pid}`).toThrow();
    expect(lines('worker exited; starting another')).toEqual([]);
    console.log(`--watch: 2 reloads and 1 failed load over ${executions.length} runs, each executed once; workers ${workerPids.join(', ')}`);
  }, 300_000);

  it('a run that outlasts the grace is handed over: the new worker goes on from its memoized step with the new code; its stream ends once', async () => {
    const { dir, s, api, lines, logs, submit, running, release, ended, reloaded, counted } = await watchedStart(3_000);
    const handed = await submit('a');
    const stream = readSse(`${api}/v1/scopes/acme/runs/${handed}/events`, { headers: AUTH });
    await running(handed);
    writeFileSync(join(dir, 'reply.mjs'), reply('v2'));
    await reloaded(1);
    // Generation 1 holds the run past its 3 s grace, hands it over and stops; generation 2 claims it.
    await waitFor(() => logs().some((l) => l.msg === 'worker stopped' && l.generation === 1), 60_000, `generation 1 to stop:\n${s.out()}`);
    await waitFor(() => counted('runs.log').length === 2, 60_000, 'the run to start again on generation 2');
    release('a');
    expect(await ended(handed)).toMatchObject({ status: 'succeeded', result: { answer: 'v2: a' } });
    // The agent ran twice, its step once; the stream ends once.
    expect(counted('runs.log')).toEqual([handed, handed]);
    expect(counted('steps.log')).toEqual([handed]);
    const { events } = await stream;
    expect(events.filter((e) => e.event === 'end')).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ event: 'end', data: { status: 'succeeded' } });

    process.kill(-s.child.pid!, 'SIGINT');
    expect(await s.exited, s.out()).toBe(0);
    expect(lines('agent modules reloaded')).toHaveLength(1);
  }, 300_000);

  it('Ctrl-C while the previous worker still drains: each worker is told once, the run it holds ends with the old code, the start exits 0', async () => {
    const { dir, s, lines, logs, submit, running, release, reloaded, counted } = await watchedStart(120_000);
    const held = await submit('a');
    await running(held);
    writeFileSync(join(dir, 'reply.mjs'), reply('v2'));
    await reloaded(1);
    // Past the 1 s in which a second signal counts as an echo of the first (shutdown.ts): one
    // more SIGTERM to generation 1 now would make it exit at once and drop the run it holds.
    await new Promise((r) => setTimeout(r, 1_500));
    process.kill(-s.child.pid!, 'SIGINT');
    await waitFor(() => logs().some((l) => l.msg === 'worker stopped' && l.generation === 2), 60_000, `generation 2 to stop:\n${s.out()}`);
    release('a');
    expect(await s.exited, s.out()).toBe(0);
    expect(logs().filter((l) => l.msg === 'second signal: exiting now')).toEqual([]);
    expect(counted('runs.log')).toEqual([held]);
    // The API is gone with the start: the run's end is in the log of the worker that ran it, once.
    expect(logs().filter((l) => l.msg === 'run finished' && l.runId === held)).toEqual([expect.objectContaining({ generation: 1, status: 'succeeded' })]);
    expect(lines('agent modules reloaded')).toHaveLength(1);
  }, 300_000);

  it('a worker whose `baton start` was SIGKILLed drains and exits by itself', async () => {
    const { s, logs } = await watchedStart(120_000);
    const workerPid = logs().find((l) => l.msg === 'worker started')!.pid as number;
    s.child.kill('SIGKILL');
    await waitFor(() => logs().some((l) => l.msg === 'worker stopped' && l.pid === workerPid), 60_000, `the orphaned worker to stop:\n${s.out()}`);
    await waitFor(() => { try { process.kill(workerPid, 0); return false; } catch { return true; } }, 30_000, `worker ${workerPid} to exit`);
  }, 120_000);

  it('--watch without --agents has nothing to watch: exit 2, saying so', () => {
    const r = spawnSync(process.execPath, [BIN, 'start', '--watch'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr).toContain('baton start --watch reloads the modules of --agents: name at least one');
  });
});
