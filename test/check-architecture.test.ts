import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers/harness.ts';

/**
 * `npm test` fails when ARCHITECTURE.md names a hop that does not exist, passes 400 lines or
 * leaves out a flow, or a flow passes its hop budget (npm run check:architecture). Shown on
 * pages written here, then on ARCHITECTURE.md itself.
 */
const dir = mkdtempSync(join(tmpdir(), 'baton-arch-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs the check in `cwd` (the pages below run in a source tree of their own, not Baton's). */
const check = (...args: string[]) => spawnSync(process.execPath, [join(ROOT, 'scripts/check-architecture.mjs'), ...args], {
  cwd: args.length && !args[0].startsWith('--') ? dir : ROOT, encoding: 'utf8',
});

/**
 * A small source tree the pages name, written here so the test holds whatever Baton's own code
 * is called: a route const, classes with methods (one private), a function handed a callback,
 * a gateway, a script caller, two scripts and a Lua helper, each calling the next.
 */
const TREE: Record<string, string> = {
  'src/api/routes-runs.ts': 'export const runRoutes = (d: { submissions: Submissions }) => d.submissions.submit({});\n',
  'src/lib/engine/submissions.ts': [
    'export class Submissions {',
    '  submit(req: object) { return traceSubmit(req, (tp: string) => this.make(req, tp)); }',
    '  private make(req: object, tp: string) { return this.transitions.submit(req, tp); }',
    '}',
  ].join('\n'),
  'src/lib/tracing/tracing.ts': 'export function traceSubmit(req: object, fn: (tp: string) => unknown) { return fn(String(req)); }\n',
  'src/lib/engine/transitions.ts': [
    'export class Transitions {',
    "  submit(r: object) { return this.callRaw('submit', r); }",
    "  claim(j: object) { return this.callRaw('claim', j); }",
    "  finish(a: object) { return this.call('finish', a); }",
    '  call(n: string, a: object) { return this.callRaw(n, a); }',
    '  callRaw(n: string, a: object) { return callLua(n, a); }',
    '}',
  ].join('\n'),
  'src/lib/engine/scripts.ts': 'export function callLua(name: string, a: object) { return [name, a]; }\n',
  'src/lib/engine/lua/submit.lua': 'local run = O.run\nreturn { run }\n',
  'src/lib/engine/lua/finish.lua': 'finishRun({ runId = O.runId })\nreturn {}\n',
  'src/lib/engine/lua/lib/finish.lua': 'local function begin() return {} end\nlocal function finishRun(o) return o end\n',
  'src/lib/engine/executor.ts': 'export class RunExecutor {\n  execute(job: object) { return closeAttempt(job); }\n}\n',
  'src/lib/engine/close.ts': 'export function closeAttempt(c: object) { return finish(c); }\nfunction finish(c: object) { return c; }\n',
  'src/lib/engine/context.ts': 'export class ContextState {\n  private stepOnce() { return 1; }\n}\n',
  'src/lib/engine/store.ts': 'export class RunStore {\n  cancel() { return 1; }\n}\n',
};
for (const [file, text] of Object.entries(TREE)) {
  mkdirSync(dirname(join(dir, file)), { recursive: true });
  writeFileSync(join(dir, file), text);
}

/** A page with the six flows: hops of the tree above, each called by the one before. */
const hops = (submit: string[]) => [
  '# A page', '',
  '```hops submit', ...submit, '```',
  '```hops claim', 'RunExecutor.execute  src/lib/engine/executor.ts  a method', '```',
  '```hops step', 'ContextState.stepOnce  src/lib/engine/context.ts  a private method', '```',
  '```hops finish', 'Transitions.finish  src/lib/engine/transitions.ts', 'finish  src/lib/engine/lua/finish.lua  the script',
  'finishRun  src/lib/engine/lua/lib/finish.lua  a Lua helper', '```',
  '```hops recovery', 'closeAttempt  src/lib/engine/close.ts  a function', 'finish  src/lib/engine/close.ts  another', '```',
  '```hops cancel', 'runRoutes  src/api/routes-runs.ts  a const', '```',
  '',
];

const page = (name: string, lines: string[]) => {
  writeFileSync(join(dir, name), `${lines.join('\n')}\n`);
  return name;
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
      'begin  src/lib/engine/lua/submit.lua  a helper of another file',
    ]).concat(['Prose that names `RunStore.cancel`, `Date.now` and `RunStore.submitOnce`, and `test/no-such.test.ts`.'])));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^check-architecture: 6 problem\(s\)$/m);
    expect(r.stderr).toMatch(/missing\.md:\d+: RunStore \(src\/lib\/engine\/store\.ts\) has no member submitOnce/);
    expect(r.stderr).toMatch(/missing\.md:\d+: test\/no-such\.test\.ts does not exist/);
    expect(r.stderr).toMatch(/missing\.md:4: submit: src\/api\/routes-runs\.ts declares no submitRun/);
    expect(r.stderr).toMatch(/missing\.md:5: submit: src\/lib\/engine\/submissions\.ts declares no Submissions\.submitRun/);
    expect(r.stderr).toMatch(/missing\.md:6: submit: src\/lib\/engine\/no-such-file\.ts does not exist/);
    expect(r.stderr).toMatch(/missing\.md:7: submit: src\/lib\/engine\/lua\/submit\.lua declares no begin/);
  });

  it('fails on hops out of the order the code calls them or with one left out, and passes a callback after the hop that hands it', () => {
    const r = check(page('order.md', hops([
      'runRoutes  src/api/routes-runs.ts', 'Submissions.submit  src/lib/engine/submissions.ts',
      // Handed by Submissions.submit to traceSubmit as a callback: it follows the hop whose text hands it.
      'Submissions.make  src/lib/engine/submissions.ts',
      // Transitions.submit left out: make does not call Transitions.callRaw.
      'Transitions.callRaw  src/lib/engine/transitions.ts',
      // Nothing above names the finish script.
      'callLua  src/lib/engine/scripts.ts', 'finish  src/lib/engine/lua/finish.lua',
    ])));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^check-architecture: 2 problem\(s\)$/m);
    expect(r.stderr).toMatch(/order\.md:7: submit: Submissions\.make does not call Transitions\.callRaw/);
    expect(r.stderr).toMatch(/order\.md:9: submit: no hop before finish/);
    // traceSubmit, which runs the callback, listed between them: its text does not call make.
    const wrapper = check(page('wrapper.md', hops([
      'Submissions.submit  src/lib/engine/submissions.ts', 'traceSubmit  src/lib/tracing/tracing.ts', 'Submissions.make  src/lib/engine/submissions.ts',
    ])));
    expect(wrapper.status).toBe(1);
    expect(wrapper.stderr).toMatch(/wrapper\.md:6: submit: traceSubmit does not call Submissions\.make/);
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

  it('prints a flow over its budget, and fails on it', () => {
    // A submit of seven hops, each called by the one before.
    const seven = [
      'runRoutes  src/api/routes-runs.ts', 'Submissions.submit  src/lib/engine/submissions.ts',
      'Submissions.make  src/lib/engine/submissions.ts', 'Transitions.submit  src/lib/engine/transitions.ts',
      'Transitions.callRaw  src/lib/engine/transitions.ts', 'callLua  src/lib/engine/scripts.ts', 'submit  src/lib/engine/lua/submit.lua',
    ];
    const r = check(page('over.md', hops(seven)));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/submit 7 \(budget 6, over\)/);
    expect(r.stderr).toMatch(/^check-architecture: 1 problem\(s\)$/m);
    expect(r.stderr).toMatch(/submit has 7 hops, over its budget of 6/);
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
