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
    const mod = (await import(pathToFileURL(resolve(p)).href)) as Record<string, unknown>;
    const found = Object.values(mod).flatMap((v) => (Array.isArray(v) ? v : [v])).filter(isAgent);
    if (found.length === 0) throw new Error(`${p} exports no agent ({ name, run })`);
    for (const a of found) agents.set(a.name, a);
  }
  return agents;
}
