import { fileURLToPath } from 'node:url';
import { closeFixtureRedis, fxKey } from '../fixtures/engine-agents.ts';
import type { Harness } from './harness.ts';
import { track } from './resources.ts';

/** Module path of the engine test agents, for `h.spawn('worker', { agents: [FIXTURE] })`. */
export const FIXTURE = fileURLToPath(new URL('../fixtures/engine-agents.ts', import.meta.url));

/**
 * Lets the fixture agents run in this process too (in-process workers): they find Redis
 * and the key prefix in the environment, exactly as a worker child inherits them.
 */
export function useFixturesInProcess(h: Harness): void {
  process.env.REDIS_URL = h.redisUrl;
  process.env.BATON_KEY_PREFIX = h.prefix;
  track(null, closeFixtureRedis);
}

export interface ParsedEvent { id: string; type: string; data: any; at: number }

/** A run's event log straight from its Redis Stream, data parsed; `at` is the entry's ms. */
export async function runEvents(h: Harness, scope: string, runId: string): Promise<ParsedEvent[]> {
  const rows = await h.redis.xrange(h.keys.scope(scope).events(runId), '-', '+');
  return rows.map(([id, fields]) => {
    const f: Record<string, string> = {};
    for (let i = 0; i < fields.length; i += 2) f[fields[i]] = fields[i + 1];
    return { id, type: f.type, data: JSON.parse(f.data), at: Number(id.split('-')[0]) };
  });
}

/** The `status` values of a run's status events, in order. */
export const statuses = (events: ParsedEvent[]) => events.filter((e) => e.type === 'status').map((e) => e.data.status);

/** What a fixture agent recorded under `name` for the run. */
export const fx = (h: Harness, runId: string, name: string) => h.redis.get(fxKey(h.prefix, runId, name));
export const fxList = (h: Harness, runId: string, name: string) => h.redis.lrange(fxKey(h.prefix, runId, name), 0, -1);
export const fxSet = (h: Harness, runId: string, name: string, value = '1') => h.redis.set(fxKey(h.prefix, runId, name), value);
