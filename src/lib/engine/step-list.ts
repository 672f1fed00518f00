import type { Redis } from 'ioredis';
import type { Keys, ScopeKeys } from '../keys.ts';
import type { Step } from '../contract/runs.ts';

/** A memoized step as read from the run's steps hash (times in epoch ms; the API shows them as ISO). */
export type StepView = Omit<Step, 'startedAt' | 'finishedAt'> & {
  /** Absent for a result an operator supplied, and for steps recorded before times were. */
  startedAt?: number;
  finishedAt?: number;
};

const STEP_KEY = /^(step|infer|tool|wait):(.+):(\d+)$/;
const STARTED = '#started';

/** A page of a run's steps: at most `limit` of them and `maxBytes` of their stored results. */
export interface StepsPageOptions { limit: number; cursor?: number; maxBytes: number }

/**
 * A page of a run's memoized steps in the order they started; undefined when the run does not
 * exist. The steps hash holds `<key>` -> `{v, e?, startedAt?, finishedAt?}` for stored results (a
 * wait's outcome too: `wait:<name>:<n>` -> `{v, timedOut?, startedAt, finishedAt}`) and
 * `<key>#started` -> ms for non-idempotent steps that began (see context-steps.ts).
 *
 * Results can be large and many, so the hash is never read whole at once: its fields are
 * measured first (HSTRLEN reads no value), then read in groups of at most `maxBytes`. A run
 * whose results all fit one page is read once, values and all; a larger one is read once for
 * the order (only the times are kept) and its page's values again. The page holds at most
 * `limit` steps and `maxBytes` bytes of results (its first step whatever its size); the cursor
 * is the place of the next step in that order (steps that start later come after every step
 * listed before them).
 */
export async function readStepsPage(
  redis: Redis, keys: Keys, scope: string, runId: string, o: StepsPageOptions,
): Promise<{ steps: StepView[]; nextCursor: string | null } | undefined> {
  const sk = keys.scope(scope);
  const measured = await stepFields(redis, sk, runId);
  if (!measured) return undefined;
  const { fields, sizes } = measured;
  const total = fields.reduce((n, f) => n + sizes.get(f)!, 0);
  const keepValues = total <= o.maxBytes;
  const read = new StepReader();
  for (const group of groups(fields, sizes, o.maxBytes)) {
    const values = await redis.hmget(sk.steps(runId), ...group);
    group.forEach((f, i) => { if (values[i] !== null) read.add(f, values[i]!, keepValues); });
  }
  const ordered = read.ordered();
  const from = Math.min(o.cursor ?? 0, ordered.length);
  let bytes = 0;
  let to = from;
  while (to < ordered.length && to - from < o.limit) {
    const size = stepBytes(ordered[to].key, sizes);
    if (to > from && bytes + size > o.maxBytes) break;
    bytes += size;
    to++;
  }
  const page = ordered.slice(from, to);
  if (!keepValues) {
    const done = page.filter((s) => s.status === 'done');
    if (done.length) {
      const values = await redis.hmget(sk.steps(runId), ...done.map((s) => s.key));
      done.forEach((s, i) => { if (values[i] !== null) s.value = (JSON.parse(values[i]!) as { v: unknown }).v; });
    }
  }
  return { steps: page, nextCursor: to < ordered.length ? String(to) : null };
}

/**
 * A run's step fields and each one's size in bytes (HSTRLEN reads no value); undefined when the
 * run does not exist. One MULTI (both keys share the scope's slot), so the steps belong to the
 * run that exists.
 */
async function stepFields(
  redis: Redis, sk: ScopeKeys, runId: string,
): Promise<{ fields: string[]; sizes: Map<string, number> } | undefined> {
  const replies = await redis.multi().exists(sk.run(runId)).hkeys(sk.steps(runId)).exec();
  for (const [err] of replies ?? []) if (err) throw err;
  if (Number(replies?.[0]?.[1]) === 0) return undefined;
  const fields = (replies?.[1]?.[1] ?? []) as string[];
  const sizes = new Map<string, number>();
  if (fields.length) {
    const pipe = redis.pipeline();
    for (const f of fields) pipe.hstrlen(sk.steps(runId), f);
    ((await pipe.exec()) ?? []).forEach(([err, n], i) => {
      if (err) throw err;
      sizes.set(fields[i], n as number);
    });
  }
  return { fields, sizes };
}

/** A step as a re-run plans with it: its place in the run, whether it ended, whether it was declared non-idempotent. */
export interface StepMark { key: string; done: boolean; nonIdempotent: boolean }

/**
 * Every step of a run in the order they started, without values (read in groups of at most
 * `maxBytes`, as readStepsPage reads them); undefined when the run does not exist. A step
 * with a start marker (`<key>#started`) was declared non-idempotent: only those get one.
 */
export async function readStepOrder(
  redis: Redis, keys: Keys, scope: string, runId: string, maxBytes: number,
): Promise<StepMark[] | undefined> {
  const sk = keys.scope(scope);
  const measured = await stepFields(redis, sk, runId);
  if (!measured) return undefined;
  const { fields, sizes } = measured;
  const read = new StepReader();
  for (const group of groups(fields, sizes, maxBytes)) {
    const values = await redis.hmget(sk.steps(runId), ...group);
    group.forEach((f, i) => { if (values[i] !== null) read.add(f, values[i]!, false); });
  }
  const marked = new Set(fields.filter((f) => f.endsWith(STARTED)).map((f) => f.slice(0, -STARTED.length)));
  return read.ordered().map((s) => ({ key: s.key, done: s.status === 'done', nonIdempotent: marked.has(s.key) }));
}

/** What a step adds to a page: its stored result, and a bound for its key, kind, name and times. */
const stepBytes = (key: string, sizes: Map<string, number>) => (sizes.get(key) ?? 0) + 2 * Buffer.byteLength(key) + 256;

/** Fields in groups of at most `maxBytes` (a larger one alone). */
function* groups(fields: string[], sizes: Map<string, number>, maxBytes: number): Generator<string[]> {
  let group: string[] = [];
  let bytes = 0;
  for (const f of fields) {
    const size = sizes.get(f)!;
    if (group.length && bytes + size > maxBytes) {
      yield group;
      group = [];
      bytes = 0;
    }
    group.push(f);
    bytes += size;
  }
  if (group.length) yield group;
}

/** Builds the steps from the hash's fields, in any order, and orders them. */
class StepReader {
  private readonly steps = new Map<string, StepView>();
  /** Where a step started among the run's steps (`o` of its result), for ordering only. */
  private readonly place = new Map<StepView, number>();

  private view(key: string): StepView | undefined {
    const m = STEP_KEY.exec(key);
    if (!m) return undefined;
    let s = this.steps.get(key);
    if (!s) this.steps.set(key, (s = { key, kind: m[1] as Step['kind'], name: m[2], n: Number(m[3]), status: 'started' }));
    return s;
  }

  /** `keepValue` false: only what orders the step and says what it is (the value is read for its page). */
  add(field: string, raw: string, keepValue: boolean): void {
    if (field.endsWith(STARTED)) {
      const s = this.view(field.slice(0, -STARTED.length));
      if (s && s.startedAt === undefined) s.startedAt = Number(raw);
      return;
    }
    const s = this.view(field);
    if (!s) return;
    const stored = JSON.parse(raw) as { v: unknown; e?: string; startedAt?: number; finishedAt?: number; timedOut?: boolean; o?: number };
    s.status = 'done';
    if (keepValue) s.value = stored.v;
    if (stored.e) s.streamed = stored.e;
    // A wait's outcome is stored like a step's result: its value, or that it timed out.
    if (stored.timedOut) s.timedOut = true;
    // The result's own times are from one clock (the worker's); a start marker is Redis time.
    if (stored.startedAt !== undefined) s.startedAt = stored.startedAt;
    if (stored.finishedAt !== undefined) s.finishedAt = stored.finishedAt;
    if (typeof stored.o === 'number') this.place.set(s, stored.o);
  }

  ordered(): StepView[] {
    // Hash field order is lost once Redis converts a hash to a hashtable: order by when each step
    // started, then, for steps that started in one millisecond, by the place each stored (results
    // stored before places were, and waits, have none), then by when they finished, then by key.
    const last = Number.MAX_SAFE_INTEGER;
    const byPlace = (a: StepView, b: StepView) => {
      const [pa, pb] = [this.place.get(a), this.place.get(b)];
      return pa !== undefined && pb !== undefined ? pa - pb : 0;
    };
    return [...this.steps.values()].sort((a, b) =>
      (a.startedAt ?? a.finishedAt ?? last) - (b.startedAt ?? b.finishedAt ?? last) ||
      byPlace(a, b) ||
      (a.finishedAt ?? last) - (b.finishedAt ?? last) ||
      (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }
}
