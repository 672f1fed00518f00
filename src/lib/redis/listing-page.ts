import type { Redis } from './redis.ts';

/**
 * Pages of a listing kept as a zset by creation (score: creation ms, member: the item's id),
 * with each item a hash: the schedules' and the bulk operations' listings. A page holds at most
 * `limit` items and `maxBytes` of them (the first whatever its size), as every listing does
 * (PAGE_MAX_BYTES); only the items that fit are read whole. The runs' listing walks several
 * indexes at once and has its own walker (engine/run-listing.ts).
 */

/** Where a page ended: the creation ms and id of its last item; the cursor is `<ms>_<id>`. */
export interface Position { score: number; id: string }

export function positionCursor(p: Position): string {
  return `${p.score}_${p.id}`;
}

/** A cursor the route checked against `<digits>_<id>`. */
export function parsePositionCursor(cursor: string): Position {
  const at = cursor.indexOf('_');
  return { score: Number(cursor.slice(0, at)), id: cursor.slice(at + 1) };
}

/**
 * Up to `count` entries of the index strictly after `after`, oldest or newest first. Positions,
 * not offsets: items made or deleted meanwhile move no other's place. Within one millisecond the
 * zset orders by id, and so does this.
 */
export async function entriesAfter(
  redis: Redis, key: string, after: Position | undefined, count: number, order: 'oldest' | 'newest',
): Promise<Position[]> {
  const oldest = order === 'oldest';
  // From `from` towards `to` in the listing's order (ZREVRANGEBYSCORE takes its bounds high first).
  const range = (from: string, to: string, limit = -1) => (oldest
    ? redis.zrangebyscore(key, from, to, 'WITHSCORES', 'LIMIT', 0, limit)
    : redis.zrevrangebyscore(key, to, from, 'WITHSCORES', 'LIMIT', 0, limit));
  let flat: string[];
  if (!after) {
    flat = await range('-inf', '+inf', count);
  } else {
    // The rest of the position's millisecond (a handful at most), then the ones past it.
    const past = oldest ? [`(${after.score}`, '+inf'] : ['-inf', `(${after.score}`];
    const [same, rest] = await Promise.all([range(String(after.score), String(after.score)), range(past[0], past[1], count)]);
    flat = [];
    for (let i = 0; i < same.length; i += 2) if (oldest ? same[i] > after.id : same[i] < after.id) flat.push(same[i], same[i + 1]);
    flat.push(...rest);
  }
  const out: Position[] = [];
  for (let i = 0; i < flat.length && out.length < count; i += 2) out.push({ id: flat[i], score: Number(flat[i + 1]) });
  return out;
}

/**
 * What each hash would add to a page: the bytes of its `fields` (HSTRLEN, which reads none of
 * them) and `overhead` for the rest, a bound the caller states.
 */
export async function measure(redis: Redis, keys: string[], fields: readonly string[], overhead: number): Promise<number[]> {
  if (keys.length === 0) return [];
  const pipe = redis.pipeline();
  for (const k of keys) for (const f of fields) pipe.hstrlen(k, f);
  const rows = (await pipe.exec()) ?? [];
  return keys.map((_, i) => {
    let n = overhead;
    for (let j = 0; j < fields.length; j++) {
      const [err, len] = rows[i * fields.length + j] ?? [new Error('no reply'), 0];
      if (err) throw err;
      n += len as number;
    }
    return n;
  });
}

/** How many of the items, in order, fit `maxBytes`: at least the first, whatever its size. */
export function fitting(sizes: number[], maxBytes: number): number {
  let fit = 0;
  for (let bytes = 0; fit < sizes.length && (fit === 0 || bytes + sizes[fit] <= maxBytes); fit++) bytes += sizes[fit];
  return fit;
}

/** HGETALL of each key, in one pipeline. */
export async function readHashes(redis: Redis, keys: string[]): Promise<Record<string, string>[]> {
  if (keys.length === 0) return [];
  const pipe = redis.pipeline();
  for (const k of keys) pipe.hgetall(k);
  return ((await pipe.exec()) ?? []).map(([err, h]) => {
    if (err) throw err;
    return h as Record<string, string>;
  });
}
