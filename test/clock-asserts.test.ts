import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers/harness.ts';

/**
 * `npm test` fails on a test that asserts a measured time (npm run check:clock): shown on a
 * small folder of tests with such assertions beside ones that are fine, then on test/ itself.
 */
const dir = mkdtempSync(join(tmpdir(), 'baton-clock-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const checkClock = (...paths: string[]) => spawnSync(process.execPath, ['scripts/check-clock-asserts.mjs', ...paths], {
  cwd: ROOT, encoding: 'utf8',
});

const MEASURED = `import { expect, it } from 'vitest';
declare const work: () => Promise<void>;
declare const run: { startedAt: string; finishedAt: string; attempt: number };
it('measures', async () => {
  const t0 = Date.now();
  await work();
  const took = Date.now() - t0;
  expect(took).toBeLessThan(5_000);
  const start = performance.now();
  await work();
  expect(performance.now() - start, 'fast').toBeLessThanOrEqual(50);
  const stamps: number[] = [];
  stamps.push(Date.now());
  expect(stamps[0] - t0 < 100).toBe(true);
  const since = () => Date.now() - t0;
  expect(since()).not.toBeGreaterThan(3_000);
  const seen = [{ at: Date.now() }];
  expect(seen[0].at).toBeGreaterThan(0);
  // Fine: server stamps compared for order, a count, clock readings used as data.
  expect(new Date(Date.now() + 1_000).getFullYear()).toBeGreaterThan(2000);
  expect(Date.parse(run.startedAt)).toBeGreaterThanOrEqual(Date.parse(run.finishedAt));
  expect(run.attempt).toBe(1);
  expect(\`id-\${Date.now()}\`).toMatch(/^id-/);
});
`;

describe('the check for assertions on a measured time', () => {
  it('fails on each one, named by file and line, and passes the rest', () => {
    writeFileSync(join(dir, 'measured.test.ts'), MEASURED);
    const r = checkClock(dir);
    expect(r.status).toBe(1);
    const named = [...r.stderr.matchAll(/measured\.test\.ts:(\d+): expect\(.*\)\.(\w+)\(…\) asserts a measured time/g)].map((m) => [Number(m[1]), m[2]]);
    expect(named).toEqual([[8, 'toBeLessThan'], [11, 'toBeLessThanOrEqual'], [14, 'toBe'], [16, 'toBeGreaterThan'], [18, 'toBeGreaterThan']]);
    expect(r.stderr).toMatch(/^check-clock: 5 assertion\(s\) on a measured time/);
    expect(r.stderr).toMatch(/\(Date\.now\(\) via took\): count the work that happened instead/);
  });

  it('finds none in test/', () => {
    const r = checkClock();
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^check-clock: \d+ test files assert no measured time/);
  });
});
