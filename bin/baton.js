#!/usr/bin/env node
// Baton ships TypeScript sources and runs them through tsx, so there is no build step
// between a checkout and a running service.
import { register } from 'tsx/esm/api';
register();
await import('../src/cli/main.ts');
