import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { isAgent, type Agent } from '../lib/sdk/agent.ts';
import { builtinChatAgent, type BuiltinChatSettings } from '../lib/agents/chat.ts';
import { echo } from '../lib/agents/echo.ts';

/** The built-in agents, the `chat` one set up from the process's configuration. */
export function builtinAgents(config: BuiltinChatSettings): Agent[] {
  return [echo, builtinChatAgent(config)];
}

/**
 * Built-in agents plus every agent exported by the given modules (default export, named
 * exports, or an array of agents). A module that exports no agent is a configuration error.
 */
export async function loadAgents(paths: readonly string[], builtins: readonly Agent[]): Promise<Map<string, Agent>> {
  const agents = new Map<string, Agent>(builtins.map((a) => [a.name, a]));
  for (const p of paths) {
    const mod = await importAgentModule(p);
    const found = Object.values(mod).flatMap((v) => (Array.isArray(v) ? v : [v])).filter(isAgent);
    if (found.length === 0) throw new Error(`${p} exports no agent ({ name, run })`);
    for (const a of found) agents.set(a.name, a);
  }
  return agents;
}

const TYPESCRIPT_MODULE = /\.[cm]?tsx?$/;
// This file is itself TypeScript when it runs from src/ (tests, the tsx launcher): a loader
// that can import .ts is in place already and must not be registered a second time.
const RUNNING_FROM_SOURCES = import.meta.url.endsWith('.ts');

/**
 * A .js/.mjs module is imported as it is. A .ts module needs a TypeScript loader, which the
 * compiled `baton` registers only then: tsx (an optional dependency, installed by default)
 * when present, which takes any TypeScript on every supported Node version; else Node's own
 * type stripping (22.18+, 23.6+), which takes erasable syntax only.
 */
async function importAgentModule(path: string): Promise<Record<string, unknown>> {
  if (TYPESCRIPT_MODULE.test(path) && !RUNNING_FROM_SOURCES) await typeScriptLoader(path);
  return (await import(pathToFileURL(resolve(path)).href)) as Record<string, unknown>;
}

/** Whether tsx could be registered (once per process, at the first .ts module). */
let tsx: Promise<boolean> | undefined;

async function typeScriptLoader(path: string): Promise<void> {
  tsx ??= import('tsx/esm/api').then(({ register }) => { register(); return true; }, () => false);
  if (await tsx) return;
  if ((process.features as { typescript?: string | false }).typescript) return;
  throw new Error(`${path} is TypeScript: install tsx (npm install tsx), run Node 22.18 or later, or compile it to .js`);
}
