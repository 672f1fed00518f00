import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/lib/contract/errors.ts';
import { RUN_LIMIT_CODES } from '../src/lib/contract/runs.ts';

/** docs/error-codes.md's table is the documentation of the registry: same codes, same statuses. */
describe('the documented error codes', () => {
  it('are exactly the codes of ERROR_CODES, each with its status', () => {
    const page = readFileSync(new URL('../docs/error-codes.md', import.meta.url), 'utf8');
    const documented = Object.fromEntries(
      [...page.matchAll(/^\| `([A-Z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]),
    );
    const registry = Object.fromEntries(Object.entries(ERROR_CODES).map(([code, e]) => [code, e.status]));
    expect(documented).toEqual(registry);
  });

  it('list exactly the run failure codes Baton sets (RUN_LIMIT_CODES)', () => {
    const page = readFileSync(new URL('../docs/error-codes.md', import.meta.url), 'utf8');
    const section = page.slice(page.indexOf('## Run failure codes'));
    const documented = [...section.matchAll(/^\| `([A-Z_]+)` \| /gm)].map((m) => m[1]);
    expect(documented.sort()).toEqual(Object.values(RUN_LIMIT_CODES).sort());
  });
});
