#!/usr/bin/env node
// Test-only: `baton init <args>` run from src/ through tsx as if this package were installed at
// INIT_FROM (a folder holding package.json and templates/), so a test can run init from an
// installed copy, which a checkout is not.
import { register } from 'tsx/esm/api';

register();
const { runInit } = await import('../../src/cli/init.ts');
process.exit(runInit(process.argv.slice(2), process.env, process.env.INIT_FROM));
