import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';

/** One event of a run's log: the Redis Stream entry id, its type and its JSON data (as text). */
export interface RunEvent { id: string; type: string; data: string }

/** Orders two stream ids (`<ms>-<seq>`): negative when a < b. */
export function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-');
  const [bm, bs] = b.split('-');
  if (am.length !== bm.length) return am.length - bm.length;
  if (am !== bm) return am < bm ? -1 : 1;
  if (as.length !== bs.length) return as.length - bs.length;
  return as === bs ? 0 : as < bs ? -1 : 1;
}

/** Reads a run's event log after `afterId` (exclusive; '0' = from the start), in pages. */
export async function readEvents(
  redis: Redis, keys: Keys, scope: string, runId: string, afterId: string, count = 1000,
): Promise<RunEvent[]> {
  const start = afterId === '0' ? '-' : `(${afterId}`;
  const rows = await redis.xrange(keys.scope(scope).events(runId), start, '+', 'COUNT', count);
  return rows.map(([id, fields]) => toEvent(id, fields));
}

function toEvent(id: string, fields: string[]): RunEvent {
  let type = '';
  let data = '';
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i] === 'type') type = fields[i + 1];
    else if (fields[i] === 'data') data = fields[i + 1];
  }
  return { id, type, data };
}

/** The events one script call appended to a run's log, and the id of the entry before them. */
export interface LiveBatch { prev: string; events: RunEvent[] }

/**
 * Parses a live notification published by the Lua scripts on a scope's channel, one per
 * call: `{runs: [[runId, prev, [[id, type, data], ...]], ...]}`, the batch of each run the call
 * wrote to, by run id.
 */
export function parseNotification(message: string): Map<string, LiveBatch> {
  const raw = JSON.parse(message) as { runs?: unknown };
  if (!Array.isArray(raw.runs)) throw new Error('not a live notification');
  const out = new Map<string, LiveBatch>();
  for (const run of raw.runs as unknown[]) {
    if (!Array.isArray(run) || typeof run[0] !== 'string' || typeof run[1] !== 'string' || !Array.isArray(run[2])) {
      throw new Error('not a live batch');
    }
    out.set(run[0], { prev: run[1], events: (run[2] as [string, string, string][]).map(([id, type, data]) => ({ id, type, data })) });
  }
  return out;
}

/** The newest event of a run's log; undefined when the run is unknown or its log expired. */
export async function lastEvent(redis: Redis, keys: Keys, scope: string, runId: string): Promise<RunEvent | undefined> {
  const rows = await redis.xrevrange(keys.scope(scope).events(runId), '+', '-', 'COUNT', 1);
  return rows.length ? toEvent(rows[0][0], rows[0][1]) : undefined;
}
