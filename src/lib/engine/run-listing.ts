import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';
import { parseRunRecord, parseWaits, SHOWN_HASH_FIELDS, type RunStatus, type ShownRun } from '../transitions/record.ts';

/**
 * GET /runs: a scope's runs (or one session's), newest first, by index. Each index is a zset
 * scored by creation ms: `runs` (the scope), `session:<sid>:runs`, `agent:<agent>:runs` and
 * `runtime:<runtime>:runs` (written by transitions/submit.lua), and `status:<status>`, kept by
 * setStatus in transitions/lib/status.lua for every status a run moves into. A filtered listing walks the
 * index of its filter (a status filter the indexes of those statuses, merged), so
 * `status=blocked&limit=1` or `agent=triage&limit=1` reads one run however many runs the
 * scope holds. With several filters it walks the smallest (by ZCARD) and checks the others on
 * the candidates' fields, reading only those fields. The runs returned are read with the
 * fields the API shows (SHOWN_FIELDS): never the caller memory, the output schema or the lease.
 * Runs created before the agent and runtime indexes existed are in neither: a listing that
 * walks one of those leaves them out (the other listings show them until they expire).
 * `rerunOf` walks the run's index of its re-runs (`run:<id>:reruns`, transitions/submit.lua); a run
 * whose re-runs an earlier version made has no index until it is re-run again, and its
 * re-runs are found in its session's index (a re-run stays in its run's session) by their
 * `rerunOf` field.
 */
export interface ListOptions {
  sessionId?: string;
  status?: RunStatus[];
  agent?: string;
  runtime?: string;
  /** The re-runs of this run. */
  rerunOf?: string;
  limit: number;
  cursor?: string;
  /**
   * The page's byte budget (PAGE_MAX_BYTES): the runs' shown fields, measured before they are
   * read, stop the page once the next run would pass it; the first run comes whatever its size.
   */
  maxBytes?: number;
}

export interface RunsListing { runs: ShownRun[]; nextCursor: string | null }

interface Entry { id: string; score: number; index: string }

/** Newest first: creation ms descending, then run id descending (the zset's own order within a score). */
const newer = (a: Entry, b: Entry) => a.score > b.score || (a.score === b.score && a.id > b.id);

/** The fields of a run that may be large (a turn's text, an answer, JSON a tenant wrote): a page is measured by them. */
const SIZED_FIELDS = ['input', 'result', 'metadata', 'lastError', 'blocked'] as const;
/** What a shown run takes beyond its sized fields (ids, times, status, links), as a generous bound. */
const RUN_OVERHEAD_BYTES = 2048;

/** The fields the filters that no index answered are checked on. */
const FILTER_FIELDS = ['status', 'sessionId', 'agent', 'runtime', 'rerunOf'] as const;
type FilterField = (typeof FILTER_FIELDS)[number];

/**
 * A filter: the record field it checks, and its index (a status filter's: one per status,
 * merged). `loose`: the index holds more than the filter keeps (checked even when walked).
 */
interface Choice { field: FilterField; keys: string[]; keep: (value: string) => boolean; loose?: boolean }

/** The filter whose index holds the fewest entries (one pipeline of ZCARDs; none for one filter). */
async function smallest(redis: Redis, choices: Choice[]): Promise<Choice | undefined> {
  if (choices.length < 2) return choices[0];
  const pipe = redis.pipeline();
  for (const c of choices) for (const k of c.keys) pipe.zcard(k);
  const sizes = ((await pipe.exec()) ?? []).map(([err, n]) => {
    if (err) throw err;
    return n as number;
  });
  let best = choices[0];
  let bestSize = Infinity;
  let at = 0;
  for (const c of choices) {
    const size = sizes.slice(at, (at += c.keys.length)).reduce((a, b) => a + b, 0);
    if (size < bestSize) [best, bestSize] = [c, size];
  }
  return best;
}

/**
 * Reads one index newest first, strictly after a position (score, id). Positions, not offsets:
 * runs that are added, change status or expire while a listing pages through move no one
 * else's place.
 */
class IndexWalker {
  private buffer: Entry[] = [];
  /** The last read came back short of a batch: nothing older is left to read. */
  private done = false;

  constructor(
    private readonly redis: Redis,
    readonly key: string,
    private position: { score: number; id: string } | undefined,
    private readonly batch: number,
  ) {}

  async peek(): Promise<Entry | undefined> {
    if (this.buffer.length === 0 && !this.done) await this.fill();
    return this.buffer[0];
  }

  take(): Entry | undefined {
    return this.buffer.shift();
  }

  private async fill(): Promise<void> {
    const p = this.position;
    let flat: string[];
    let olderCount: number;
    if (!p) {
      flat = await this.redis.zrevrangebyscore(this.key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, this.batch);
      olderCount = flat.length / 2;
    } else {
      // The rest of the position's millisecond (ids below it), then older milliseconds.
      const [same, older] = (await this.redis.pipeline()
        .zrevrangebyscore(this.key, p.score, p.score, 'WITHSCORES')
        .zrevrangebyscore(this.key, `(${p.score}`, '-inf', 'WITHSCORES', 'LIMIT', 0, this.batch)
        .exec()) ?? [];
      if (same?.[0]) throw same[0];
      if (older?.[0]) throw older[0];
      flat = [...(same?.[1] as string[]), ...(older?.[1] as string[])];
      olderCount = (older?.[1] as string[]).length / 2;
    }
    if (olderCount < this.batch) this.done = true;
    for (let i = 0; i < flat.length; i += 2) {
      const e = { id: flat[i], score: Number(flat[i + 1]), index: this.key };
      if (!p || newer(p as Entry, e)) this.buffer.push(e);
    }
    if (this.buffer.length === 0) return void (this.done = true);
    const last = this.buffer[this.buffer.length - 1];
    this.position = { score: last.score, id: last.id };
  }
}

/** Several indexes merged newest first (a run is in one status index at a time). */
class MergedWalk {
  constructor(private readonly walkers: IndexWalker[]) {}

  async next(): Promise<Entry | undefined> {
    let best: IndexWalker | undefined;
    let bestEntry: Entry | undefined;
    for (const w of this.walkers) {
      const e = await w.peek();
      if (e && (!bestEntry || newer(e, bestEntry))) {
        best = w;
        bestEntry = e;
      }
    }
    return best?.take();
  }

  async hasMore(): Promise<boolean> {
    for (const w of this.walkers) if (await w.peek()) return true;
    return false;
  }
}

export async function listRuns(redis: Redis, keys: Keys, scope: string, o: ListOptions): Promise<RunsListing> {
  const sk = keys.scope(scope);
  const after = o.cursor ? parseListCursor(o.cursor) : undefined;
  const statuses = o.status ? [...new Set(o.status)] : undefined;
  // Each filter has an index; the smallest is walked and the other filters check its entries.
  // Session first: on a tie it is walked, as before there were more than two.
  const choices: Choice[] = [];
  if (o.sessionId !== undefined) choices.push({ field: 'sessionId', keys: [sk.sessionRuns(o.sessionId)], keep: (v) => v === o.sessionId });
  if (statuses) choices.push({ field: 'status', keys: statuses.map((st) => sk.runsByStatus(st)), keep: (v) => statuses.includes(v as RunStatus) });
  if (o.agent !== undefined) choices.push({ field: 'agent', keys: [sk.runsByAgent(o.agent)], keep: (v) => v === o.agent });
  if (o.runtime !== undefined) choices.push({ field: 'runtime', keys: [sk.runsByRuntime(o.runtime)], keep: (v) => v === o.runtime });
  if (o.rerunOf !== undefined) {
    const index = await rerunIndex(redis, keys, scope, o.rerunOf);
    choices.push({ field: 'rerunOf', keys: [index.key], keep: (v) => v === o.rerunOf, loose: index.loose });
  }
  const walked = await smallest(redis, choices);
  const indexes = walked ? walked.keys : [sk.runs];
  const filters: Partial<Record<FilterField, (v: string) => boolean>> = {};
  for (const c of choices) if (c !== walked || c.loose) filters[c.field] = c.keep;
  const filtered = Object.keys(filters).length > 0;
  // Unfiltered, every entry is a run to return: read as many as the page needs (and one more
  // to tell whether there is a next page). Filtered, read ahead in larger batches.
  const batch = filtered ? Math.min(200, Math.max(50, o.limit)) : o.limit + 1;
  const walk = new MergedWalk(indexes.map((k) => new IndexWalker(redis, k, after, batch)));

  const runs: ShownRun[] = [];
  let last: Entry | undefined;
  let leftover = false;
  // The page's bytes so far, and whether it stopped on them (then it has a next page, however few runs it holds).
  let bytes = 0;
  let full = false;
  while (runs.length < o.limit && !full) {
    const need = o.limit - runs.length;
    const chunk: Entry[] = [];
    while (chunk.length < (filtered ? batch : need)) {
      const e = await walk.next();
      if (!e) break;
      chunk.push(e);
    }
    if (chunk.length === 0) break;
    const expired: Entry[] = [];
    let candidates = chunk;
    if (filtered) {
      const rows = await hmgetAll(redis, chunk.map((e) => sk.run(e.id)), FILTER_FIELDS);
      candidates = [];
      rows.forEach((values, i) => {
        if (values[0] === null) return void expired.push(chunk[i]);
        const ok = FILTER_FIELDS.every((f, j) => !filters[f] || filters[f]!(values[j] ?? ''));
        if (ok) candidates.push(chunk[i]);
      });
    }
    // Only what the page still needs is read whole (as whole as the API shows it: SHOWN_HASH_FIELDS),
    // and only as much of it as fits the page's bytes.
    let wanted = candidates.slice(0, need);
    if (o.maxBytes !== undefined && (runs.length > 0 || wanted.length > 1)) {
      const sizes = await shownSizes(redis, wanted.map((e) => sk.run(e.id)));
      let fit = 0;
      while (fit < wanted.length && (bytes + sizes[fit] <= o.maxBytes || (runs.length === 0 && fit === 0))) bytes += sizes[fit++];
      if (fit < wanted.length) {
        full = true;
        wanted = wanted.slice(0, fit);
      }
    }
    const shown = await hmgetAll(redis, wanted.map((e) => sk.run(e.id)), SHOWN_HASH_FIELDS);
    const page: ShownRun[] = [];
    shown.forEach((values, i) => {
      const record: Record<string, string> = {};
      SHOWN_HASH_FIELDS.forEach((f, j) => { if (values[j] !== null) record[f] = values[j]!; });
      const run = parseRunRecord(record);
      if (!run) return void expired.push(wanted[i]);
      page.push(run);
    });
    await addPendingWaits(redis, page, (id) => sk.waits(id));
    runs.push(...page);
    // The page is full before the chunk was: what is left of it comes after this page.
    const lastWanted = wanted[wanted.length - 1];
    if (full) {
      // Stopped on bytes: the next page starts after the last run that fit.
      if (lastWanted) last = lastWanted;
    } else if (runs.length === o.limit) {
      last = lastWanted;
      leftover = chunk.indexOf(lastWanted) < chunk.length - 1;
    } else {
      last = chunk[chunk.length - 1];
    }
    // Runs past their retention leave their index entries behind; drop them as they are met.
    await removeExpired(redis, expired);
  }
  const more = full || (runs.length === o.limit && (leftover || (await walk.hasMore())));
  return { runs, nextCursor: more && last ? listCursor(last.score, last.id) : null };
}

/**
 * The index the re-runs of `runId` are in: its own (written since re-runs were bounded), else,
 * for a run whose re-runs an earlier version made, its session's (its re-runs are in its
 * session); its own (empty) when the run is gone.
 */
async function rerunIndex(redis: Redis, keys: Keys, scope: string, runId: string): Promise<{ key: string; loose: boolean }> {
  const sk = keys.scope(scope);
  const [[e1, indexed], [e2, sessionId]] = (await redis.pipeline().exists(sk.reruns(runId)).hget(sk.run(runId), 'sessionId').exec()) ?? [];
  if (e1) throw e1;
  if (e2) throw e2;
  return indexed === 0 && typeof sessionId === 'string' ? { key: sk.sessionRuns(sessionId), loose: true } : { key: sk.reruns(runId), loose: false };
}

/** What each run would add to a page: its sized fields' bytes (HSTRLEN, which reads none of them) and the rest's bound. */
async function shownSizes(redis: Redis, keys: string[]): Promise<number[]> {
  const pipe = redis.pipeline();
  for (const k of keys) for (const f of SIZED_FIELDS) pipe.hstrlen(k, f);
  const rows = (await pipe.exec()) ?? [];
  return keys.map((_, i) => {
    let n = RUN_OVERHEAD_BYTES;
    for (let j = 0; j < SIZED_FIELDS.length; j++) {
      const [err, len] = rows[i * SIZED_FIELDS.length + j] ?? [new Error('no reply'), 0];
      if (err) throw err;
      n += len as number;
    }
    return n;
  });
}

async function hmgetAll(redis: Redis, keys: string[], fields: readonly string[]): Promise<(string | null)[][]> {
  if (keys.length === 0) return [];
  const pipe = redis.pipeline();
  for (const k of keys) pipe.hmget(k, ...fields);
  const rows = (await pipe.exec()) ?? [];
  return rows.map(([err, values]) => {
    // A read that failed (Redis restarting) says nothing about the run: taking it for an
    // expired one would drop a live run from the listing for good (the chaos soak did).
    if (err) throw err;
    return values as (string | null)[];
  });
}

/**
 * The pending waits of the listed runs that wait, in one pipeline. A run that is running
 * again while another wait of its Promise.all is still pending shows that wait on its own
 * GET (which reads the waits hash with the record); a listing reads waits only where they are
 * what the run is about, so a page of runs that do not wait costs no read more.
 */
async function addPendingWaits(redis: Redis, runs: ShownRun[], key: (runId: string) => string): Promise<void> {
  const open = runs.filter((r) => r.status === 'waiting');
  if (open.length === 0) return;
  const pipe = redis.pipeline();
  for (const r of open) pipe.hgetall(key(r.id));
  const rows = (await pipe.exec()) ?? [];
  open.forEach((r, i) => {
    const [err, hash] = rows[i] ?? [new Error('no reply'), null];
    if (err) throw err;
    const waits = parseWaits(hash as Record<string, string>);
    if (waits.length) r.waits = waits;
  });
}

async function removeExpired(redis: Redis, expired: Entry[]): Promise<void> {
  if (expired.length === 0) return;
  const pipe = redis.pipeline();
  for (const e of expired) pipe.zrem(e.index, e.id);
  await pipe.exec();
}

/** List cursor: `<creation ms>_<run id>` of the last run of the previous page. */
function listCursor(score: number, id: string): string {
  return `${score}_${id}`;
}

function parseListCursor(cursor: string): { score: number; id: string } {
  const at = cursor.indexOf('_');
  return { score: Number(cursor.slice(0, at)), id: cursor.slice(at + 1) };
}
