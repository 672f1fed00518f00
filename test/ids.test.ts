import { expect, it } from 'vitest';
import { newArtifactId, newRunId } from '../src/lib/ids.ts';

it('run and artifact ids are well-formed and never repeat, across many refills of the random pool', () => {
  const ids = Array.from({ length: 3000 }, (_, i) => (i % 2 ? newRunId() : newArtifactId()));
  for (const id of ids) expect(id).toMatch(/^[ra][0-9a-z]+[0-9a-f]{16}$/);
  // The random part alone: 64 bits each, so a repeat means bytes were handed out twice.
  expect(new Set(ids.map((id) => id.slice(-16))).size).toBe(ids.length);
});
