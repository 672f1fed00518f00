import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/lib/contract/errors.ts';
import { ROOT } from './helpers/harness.ts';

/** README.md's "Error codes" table is the documentation of the registry: same codes, same statuses. */
describe('the documented error codes', () => {
  it('are exactly the codes of ERROR_CODES, each with its status', () => {
    const readme = readFileSync(`${ROOT}README.md`, 'utf8');
    const section = readme.split(/^## Error codes$/m)[1]?.split(/^## /m)[0];
    expect(section, 'README.md has a "## Error codes" section').toBeDefined();
    const documented = Object.fromEntries(
      [...section!.matchAll(/^\| `([A-Z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]),
    );
    const registry = Object.fromEntries(Object.entries(ERROR_CODES).map(([code, e]) => [code, e.status]));
    expect(documented).toEqual(registry);
  });
});
