import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';

/**
 * One event of a run's log: the Redis Stream entry id, its type and its JSON data: as text, or,
 * read from the log and larger than LARGE_DATA, as the bytes that go to a reader's socket.
 */
export interface RunEvent { id: string; type: string; data: string | Buffer }

/**
 * Data read from the log past this many bytes stays bytes: decoding it to a string, and
 * encoding that again for the socket, made each byte of a replay three copies of garbage
 * (a reader that never read a 6 MB log made the API read 4 MB for its kernel buffers, and
 * 200 of them raised its RSS by 110 MB in 5 s; 21 to 81 MB as bytes).
 */
export const LARGE_DATA = 16 * 1024;

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
  const rows = await redis.xrangeBuffer(keys.scope(scope).events(runId), start, '+', 'COUNT', count);
  return rows.map(([id, fields]) => {
    let type = '';
    let data: string | Buffer = '';
    for (let i = 0; i < fields.length; i += 2) {
      const name = fields[i].toString();
      if (name === 'type') type = fields[i + 1].toString();
      else if (name === 'data') data = fields[i + 1].length > LARGE_DATA ? owned(fields[i + 1]) : fields[i + 1].toString();
    }
    return { id: id.toString(), type, data };
  });
}

/**
 * `b`, or a copy of it when it is a view of a larger buffer: a reply's values can be views of
 * the connection's read buffer, which a reader holding one (a socket that does not take it)
 * would keep whole.
 */
function owned(b: Buffer): Buffer {
  return b.byteOffset === 0 && b.length === b.buffer.byteLength ? b : Buffer.from(b);
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
