import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers/harness.ts';

/**
 * A machine without luacheck (or Chromium, or Prometheus) still passes `npm test`, naming
 * what it skipped and how to install it; CI (CI=true) fails instead, so it keeps every check.
 * Shown on check:lua with luacheck hidden from PATH: a folder of links to every program on
 * PATH but luacheck.
 */
const hidden = mkdtempSync(join(tmpdir(), 'baton-path-'));
afterAll(() => rmSync(hidden, { recursive: true, force: true }));

function pathWithout(program: string): string {
  const seen = new Set<string>();
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    let names: string[];
    try { names = readdirSync(dir); } catch { continue; }
    for (const name of names) {
      if (name === program || seen.has(name)) continue;
      seen.add(name);
      symlinkSync(join(dir, name), join(hidden, name));
    }
  }
  return hidden;
}

describe('a check whose program is missing', () => {
  const PATH = pathWithout('luacheck');
  const checkLua = (env: Record<string, string | undefined>) => spawnSync(process.execPath, ['--import', 'tsx', 'scripts/check-lua.mjs'], {
    cwd: ROOT, encoding: 'utf8', env: { ...process.env, PATH, ...env },
  });

  it('is skipped by name, with its install command, and the rest of the check runs', () => {
    const r = checkLua({ CI: undefined });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/SKIPPED luacheck, which is not installed \(apt-get install -y lua-check\)/);
    expect(r.stdout).toMatch(/\d+ transitions and \d+ helper files read records by name/);
  });

  it('fails the run with CI=true', () => {
    const r = checkLua({ CI: 'true' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/luacheck .* is needed with CI=true and is not installed: apt-get install -y lua-check/);
  });
});
