import type { Runtime } from './api.ts';

/**
 * Whether a live worker of `runtime` serves `agent`, by the API's runtimes list (`GET
 * …/runtimes`, which any key of the scope may read). A runtime with no live worker is not in
 * that list, so none of its agents is served. A run waiting to start whose agent is not
 * served waits for such a worker, and fails UNKNOWN_AGENT after the API's AGENT_GRACE_MS.
 */
export function isServed(runtimes: readonly Runtime[], runtime: string, agent: string): boolean {
  return runtimes.some((rt) => rt.runtimeId === runtime && rt.agents.includes(agent));
}

/** The one status under which a run waits for a worker (the API shows `dispatched` as queued). */
export const WAITS_FOR_WORKER = 'queued';
