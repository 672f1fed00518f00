#!/usr/bin/env node
// Test-only launcher: the `baton` command run from src/ through tsx. Tests and benchmarks
// spawn this instead of bin/baton.js, so they need no build and always run the code under
// test (bin/baton.js runs dist/). Never shipped: the package's `files` leave test/ out.
import { register } from 'tsx/esm/api';

register();
await import('../../src/cli/main.ts');
