import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers/harness.ts';

/**
 * `npm test` fails when the rooms of src/lib or src/lib/engine import one another in a circle,
 * when a source file passes 500 lines, and when src/lib or src/lib/engine has too many files at
 * its top (npm run check:imports). Shown on source trees written here, then on Baton's own.
 */
const dirs: string[] = [];
afterAll(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

function check(tree: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), 'baton-layers-'));
  dirs.push(dir);
  for (const [file, text] of Object.entries({ 'test/.keep': '', 'bench/.keep': '', ...tree })) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), text);
  }
  return spawnSync(process.execPath, [join(ROOT, 'scripts/check-layers.mjs')], { cwd: dir, encoding: 'utf8' });
}

const one = (name: string) => `export const ${name} = 1;\n`;

describe('the rooms check', () => {
  it('passes rooms that import one way', () => {
    const r = check({
      'src/lib/keys.ts': one('keys'),
      'src/lib/engine/store.ts': "import { keys } from '../keys.ts';\nexport const store = keys;\n",
      'src/lib/engine/flow/budgets.ts': "import { store } from '../store.ts';\nexport const budgets = store;\n",
      'src/lib/streams/hub.ts': "import type { store } from '../engine/store.ts';\nexport const hub = 1;\n",
    });
    expect(r.status, r.stderr).toBe(0);
  });

  it('fails on a circle of rooms, type-only imports included, in src/lib and in src/lib/engine, naming the imports', () => {
    const r = check({
      'src/lib/engine/store.ts': "import type { hub } from '../streams/hub.ts';\nexport const store = 1;\n",
      'src/lib/streams/hub.ts': "import { store } from '../engine/store.ts';\nexport const hub = store;\n",
      'src/lib/engine/close.ts': "import { budgets } from './flow/budgets.ts';\nexport const close = budgets;\n",
      'src/lib/engine/flow/budgets.ts': "import type { close } from '../close.ts';\nexport const budgets = 1;\n",
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/src\/lib: its rooms import one another in a circle: (engine -> streams -> engine|streams -> engine -> streams)/);
    expect(r.stderr).toMatch(/src\/lib\/engine\/store\.ts -> src\/lib\/streams\/hub\.ts/);
    expect(r.stderr).toMatch(/src\/lib\/engine: its rooms import one another in a circle: (close\.ts -> flow -> close\.ts|flow -> close\.ts -> flow)/);
  });

  it('fails on a file past 500 lines and on too many files at the top of src/lib and src/lib/engine', () => {
    const tree: Record<string, string> = { 'src/lib/sdk/ai.ts': one('ai') + '\n'.repeat(500) };
    for (let i = 0; i < 9; i++) tree[`src/lib/top${i}.ts`] = one(`top${i}`);
    for (let i = 0; i < 26; i++) tree[`src/lib/engine/part${i}.ts`] = one(`part${i}`);
    const r = check(tree);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/src\/lib\/sdk\/ai\.ts has 501 lines, more than 500/);
    expect(r.stderr).toMatch(/src\/lib has 9 files at its top, more than 8/);
    expect(r.stderr).toMatch(/src\/lib\/engine has 26 files at its top, more than 25/);
  });

  it('passes Baton\'s own source tree', () => {
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts/check-layers.mjs')], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
  });
});
