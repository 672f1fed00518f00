import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { configSchema } from '../src/lib/config.ts';

/** README's configuration table names exactly the variables Baton reads. */
it('README documents every configuration variable and no other', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const section = readme.split('## Configuration')[1].split('\n## ')[0];
  const documented = new Set<string>();
  for (const line of section.split('\n').filter((l) => l.startsWith('| `'))) {
    const firstCell = line.split('|')[1];
    for (const m of firstCell.matchAll(/`([A-Z][A-Z0-9_]+)`/g)) documented.add(m[1]);
  }
  expect([...documented].sort()).toEqual(Object.keys(configSchema.shape).sort());
});
