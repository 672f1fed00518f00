// Entry of the schema thread when Baton runs from its TypeScript sources (tsx, vitest).
// Node 20 starts a worker thread without the parent's module hooks and ignores `--import
// tsx` in a thread's execArgv, so the thread registers tsx itself before loading the .ts
// file. Compiled builds start schema-thread.js directly and never load this file.
import { register } from 'tsx/esm/api';

register();
await import('./schema-thread.ts');
