import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers/harness.ts';

/**
 * `npm test` fails when ARCHITECTURE.md names a hop that does not exist, passes 400 lines or
 * leaves out a flow (npm run check:architecture); a flow over its hop budget fails under
 * --budget. Shown on pages written here, then on ARCHITECTURE.md itself.
 */
const dir = mkdtempSync(join(tmpdir(), 'baton-arch-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const check = (...args: string[]) => spawnSync(process.execPath, ['scripts/check-architecture.mjs', ...args], { cwd: ROOT, encoding: 'utf8' });

/** A page with the six flows: real hops (a method, a function, a const, a script, a Lua helper), each called by the one before. */
const hops = (submit: string[]) => [
  '# A page', '',
  '```hops submit', ...submit, '```',
  '```hops claim', 'RunExecutor.execute  src/lib/engine/executor.ts  a method', '```',
  '```hops step', 'ContextState.stepOnce  src/lib/engine/context.ts  a private method', '```',
  '```hops finish', 'AttemptGateway.finish  src/lib/engine/transitions/attempt-gateway.ts', 'finish  src/lib/engine/transitions/finish.lua  the script',
  'finishRun  src/lib/engine/transitions/lib/finish.lua  a Lua helper', '```',
  '```hops recovery', 'closeAttempt  src/lib/engine/close.ts  a function', 'finish  src/lib/engine/close.ts  another', '```',
  '```hops cancel', 'runRoutes  src/api/routes-runs.ts  a const', '```',
  '',
];

const page = (name: string, lines: string[]) => {
  const path = join(dir, name);
  writeFileSync(path, `${lines.join('\n')}\n`);
  return path;
};

describe('the check of ARCHITECTURE.md', () => {
  it('passes a page whose hops all exist', () => {
    const r = check(page('good.md', hops(['Submissions.submit  src/lib/engine/submissions.ts  the API\'s submit'])));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/hops: submit 1 \(budget 6\), claim 1, step 1, finish 3 \(budget 6\), recovery 2 \(budget 6\), cancel 1$/m);
  });

  it('fails on a function, a method or a file that does not exist, naming each, in its hop lists and its prose', () => {
    const r = check(page('missing.md', hops([
      'submitRun  src/api/routes-runs.ts  a function not written yet',
      'Submissions.submitRun  src/lib/engine/submissions.ts  a method the class does not have',
      'RunStore.create  src/lib/engine/no-such-file.ts',
      'begin  src/lib/engine/transitions/submit.lua  a helper of another file',
    ]).concat(['Prose that names `RunStore.create`, `Date.now` and `RunStore.submitOnce`, and `test/no-such.test.ts`.'])));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^check-architecture: 6 problem\(s\)$/m);
    expect(r.stderr).toMatch(/missing\.md:\d+: RunStore \(src\/lib\/engine\/store\.ts\) has no member submitOnce/);
    expect(r.stderr).toMatch(/missing\.md:\d+: test\/no-such\.test\.ts does not exist/);
    expect(r.stderr).toMatch(/missing\.md:4: submit: src\/api\/routes-runs\.ts declares no submitRun/);
    expect(r.stderr).toMatch(/missing\.md:5: submit: src\/lib\/engine\/submissions\.ts declares no Submissions\.submitRun/);
    expect(r.stderr).toMatch(/missing\.md:6: submit: src\/lib\/engine\/no-such-file\.ts does not exist/);
    expect(r.stderr).toMatch(/missing\.md:7: submit: src\/lib\/engine\/transitions\/submit\.lua declares no begin/);
  });

  it('fails on hops out of the order the code calls them, and passes a callback called from further up', () => {
    const r = check(page('order.md', hops([
      'runRoutes  src/api/routes-runs.ts', 'Submissions.submit  src/lib/engine/submissions.ts', 'traceSubmit  src/lib/ops/tracing.ts',
      // Called by Submissions.submit through traceSubmit's callback: in order.
      'RunStore.create  src/lib/engine/store.ts',
      // Nothing above calls these two: the claim's gateway method and the finish script.
      'WorkerGateway.claim  src/lib/engine/transitions/attempt-gateway.ts', 'finish  src/lib/engine/transitions/finish.lua',
    ])));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^check-architecture: 2 problem\(s\)$/m);
    expect(r.stderr).toMatch(/order\.md:8: submit: no hop before WorkerGateway\.claim calls it/);
    expect(r.stderr).toMatch(/order\.md:9: submit: no hop before finish calls it/);
  });

  it('fails on a page past 400 lines, a flow left out, a hop it cannot read and a count that is not the list\'s', () => {
    const lines = hops(['Submissions.submit  src/lib/engine/submissions.ts', 'a hop with no path']).filter((l) => l !== '```hops cancel');
    lines.push('**submit** (5 hops):', ...Array.from({ length: 400 }, (_, i) => `line ${i}`));
    const r = check(page('long.md', lines));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/long\.md has 4\d\d lines, more than 400/);
    expect(r.stderr).toMatch(/long\.md:5: a hop is "name {2}path {2}note"/);
    expect(r.stderr).toMatch(/no hop list for cancel/);
    expect(r.stderr).toMatch(/submit is said to take 5 hops; its list has 1/);
  });

  it('prints a flow over its budget, and fails on it only under --budget', () => {
    // The submit as the API makes it today: eight hops.
    const eight = [
      'runRoutes  src/api/routes-runs.ts', 'Submissions.submit  src/lib/engine/submissions.ts', 'traceSubmit  src/lib/ops/tracing.ts',
      'RunStore.create  src/lib/engine/store.ts', 'ApiGateway.submit  src/lib/engine/transitions/api-gateway.ts',
      'submit  src/lib/engine/transitions/submit.ts', 'ScriptCaller.callRaw  src/lib/engine/transitions/caller.ts', 'submit  src/lib/engine/transitions/submit.lua',
    ];
    const over = page('over.md', hops(eight));
    const lenient = check(over);
    expect(lenient.status, lenient.stderr).toBe(0);
    expect(lenient.stdout).toMatch(/submit 8 \(budget 6, over\)/);
    const strict = check(over, '--budget');
    expect(strict.status).toBe(1);
    expect(strict.stderr).toMatch(/submit has 8 hops, over its budget of 6/);
  });

  it('passes ARCHITECTURE.md, whose lists name today\'s code', () => {
    const r = check();
    expect(r.status, r.stderr).toBe(0);
    const counts = Object.fromEntries([...r.stdout.matchAll(/(\w[\w-]*) (\d+)(?: \(budget \d+(?:, over)?\))?(?=,|$)/gm)].map((m) => [m[1], Number(m[2])]));
    for (const flow of ['submit', 'claim', 'step', 'finish', 'recovery', 'cancel']) expect(counts[flow]).toBeGreaterThan(1);
    // The page keeps its one submit door: no table or list of it names RunStore.submit as the API's.
    expect(readFileSync(join(ROOT, 'ARCHITECTURE.md'), 'utf8')).not.toMatch(/^RunStore\.submit /m);
  });
});
