#!/usr/bin/env node
// The `baton` command runs the compiled CLI in dist/; no TypeScript loader is registered.
// In a checkout (src/ beside dist/) it first rebuilds dist/ when a source is newer than the
// last build, so `npm start` after an edit never runs stale code. An installed package has
// no src/ and runs the dist/ it shipped with.
import { existsSync } from 'node:fs';

if (existsSync(new URL('../src/', import.meta.url))) {
  const { buildIfStale } = await import('../scripts/build.mjs');
  try {
    await buildIfStale();
  } catch (err) {
    console.error(`baton: could not build dist/: ${err.message}`);
    process.exit(1);
  }
}
await import('../dist/cli/main.js');
