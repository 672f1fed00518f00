/**
 * Module resolution hooks (node:module `register`), loaded in Node's hooks thread by
 * `trackLocalModules` (local-modules.ts): they report, through a message port, every file the
 * agent modules import locally, so `baton start --watch` knows which files to watch. Local: the
 * entry modules, then what a local module imports by path (`./x.js`, `../lib/y.ts`, an absolute
 * path or file: URL, a `#` subpath import), never under node_modules. A package imported by
 * name (`baton-agents`, `openai`) is not local, whatever its files' real paths.
 */
import type { MessagePort } from 'node:worker_threads';

export interface LocalModulesData {
  port: MessagePort;
  /** The entry modules' file: URLs. */
  entries: string[];
}

interface ResolveContext { parentURL?: string }
type NextResolve = (specifier: string, context: ResolveContext) => Promise<{ url: string }>;

let port: MessagePort;
let entries: Set<string>;
const local = new Set<string>();

export function initialize(data: LocalModulesData): void {
  port = data.port;
  entries = new Set(data.entries);
  // Every report posted before a `flush` is on its way before the answer to it (one port keeps order).
  port.on('message', (m) => { if (m === 'flush') port.postMessage('flushed'); });
  port.unref();
}

/** A loader (tsx) may tag a URL with a query; the file is what is watched. */
const bare = (url: string) => url.replace(/[?#].*$/, '');

const byPath = (specifier: string) => /^(\.{1,2}\/|\/|file:|#)/.test(specifier);

export async function resolve(specifier: string, context: ResolveContext, next: NextResolve): Promise<{ url: string }> {
  const resolved = await next(specifier, context);
  const url = bare(resolved.url);
  const fromLocal = context.parentURL !== undefined && local.has(bare(context.parentURL)) && byPath(specifier);
  if ((entries.has(url) || fromLocal) && url.startsWith('file:') && !url.includes('/node_modules/') && !local.has(url)) {
    local.add(url);
    port.postMessage(url);
  }
  return resolved;
}
