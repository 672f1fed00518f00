import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { configSchema } from '../src/lib/config.ts';

/** docs/configuration.md's table names exactly the variables Baton reads. */
it('docs/configuration.md documents every configuration variable and no other', () => {
  const page = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
  const documented = new Set<string>();
  for (const line of page.split('\n').filter((l) => l.startsWith('| `'))) {
    const firstCell = line.split('|')[1];
    for (const m of firstCell.matchAll(/`([A-Z][A-Z0-9_]+)`/g)) documented.add(m[1]);
  }
  expect([...documented].sort()).toEqual(Object.keys(configSchema.shape).sort());
});
