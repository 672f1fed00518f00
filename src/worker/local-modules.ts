import { spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { register } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MessageChannel } from 'node:worker_threads';
import type { LocalModulesData } from './local-modules-hooks.ts';

/** The files the agent modules imported locally so far (local-modules-hooks.ts says what is local). */
export interface LocalModules {
  /** Every file reported until now, the entries first. */
  files(): Promise<string[]>;
}

// The hooks module is TypeScript beside this file when it runs from src/ (through tsx, which
// Node's hooks thread uses too), and JavaScript in the build.
const HOOKS = new URL(`./local-modules-hooks${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

/**
 * Starts recording the local files that the modules at `paths` import, before they are
 * imported. Node's resolution hooks see ES module imports (`import`, `import()`); a CommonJS
 * `require` inside an agent module is not seen, so only its entry file is known.
 */
export function trackLocalModules(paths: readonly string[]): LocalModules {
  // Node resolves a module to its real path: so must the entries, to be found among the resolved.
  const entries = paths.map((p) => pathToFileURL(realPath(resolve(p))).href);
  const { port1, port2 } = new MessageChannel();
  const seen = new Set<string>(entries.map((u) => fileURLToPath(u)));
  const flushed: (() => void)[] = [];
  port1.on('message', (m: string) => {
    if (m === 'flushed') flushed.shift()?.();
    else seen.add(fileURLToPath(m));
  });
  port1.unref();
  const data: LocalModulesData = { port: port2, entries };
  register(HOOKS, { data, transferList: [port2] });
  return {
    async files() {
      await new Promise<void>((done) => {
        flushed.push(done);
        port1.postMessage('flush');
      });
      return [...seen];
    },
  };
}

function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/**
 * A load error in one line or a few, with the place when Node gave none: an ES module's
 * SyntaxError names neither file nor line (Node prints them only for an uncaught one), so the
 * JavaScript files among `files` are checked with `node --check`, which does, and the first that
 * fails is quoted. TypeScript through tsx names its place in the message already.
 */
export function describeLoadError(err: unknown, files: readonly string[]): string {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  if (!(err instanceof SyntaxError)) return message;
  for (const file of files.filter((f) => /\.[cm]?js$/.test(f))) {
    const r = spawnSync(process.execPath, ['--check', file], { encoding: 'utf8', timeout: 10_000 });
    if (r.status === 1 && r.stderr.includes('SyntaxError')) {
      // "<file>:<line>", the line, a caret under the place, the message; then Node's own stack.
      return r.stderr.split(/\n\s+at /)[0].trim();
    }
  }
  return message;
}
