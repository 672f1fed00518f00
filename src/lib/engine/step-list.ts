import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';
import type { Step } from '../contract/runs.ts';

/** A memoized step as read from the run's steps hash (times in epoch ms; the API shows them as ISO). */
export type StepView = Omit<Step, 'startedAt' | 'finishedAt'> & {
  /** Absent for a result an operator supplied, and for steps recorded before times were. */
  startedAt?: number;
  finishedAt?: number;
};

const STEP_KEY = /^(step|infer|tool|wait):(.+):(\d+)$/;
const STARTED = '#started';

/**
 * A run's memoized steps in the order they started; undefined when the run does not exist. The steps
 * hash holds `<key>` -> `{v, e?, startedAt?, finishedAt?}` for stored results (a wait's outcome
 * too: `wait:<name>:<n>` -> `{v, timedOut?, startedAt, finishedAt}`) and
 * `<key>#started` -> ms for non-idempotent steps that began (see context.ts).
 */
export async function readSteps(redis: Redis, keys: Keys, scope: string, runId: string): Promise<StepView[] | undefined> {
  const sk = keys.scope(scope);
  // One MULTI (both keys share the scope's slot), so the steps belong to the run that exists.
  const replies = await redis.multi().exists(sk.run(runId)).hgetall(sk.steps(runId)).exec();
  for (const [err] of replies ?? []) if (err) throw err;
  if (Number(replies?.[0]?.[1]) === 0) return undefined;
  const hash = (replies?.[1]?.[1] ?? {}) as Record<string, string>;

  const steps = new Map<string, StepView>();
  /** Where a step started among the run's steps (`o` of its result), for ordering only. */
  const place = new Map<StepView, number>();
  const view = (key: string): StepView | undefined => {
    const m = STEP_KEY.exec(key);
    if (!m) return undefined;
    let s = steps.get(key);
    if (!s) steps.set(key, (s = { key, kind: m[1] as Step['kind'], name: m[2], n: Number(m[3]), status: 'started' }));
    return s;
  };
  for (const [field, raw] of Object.entries(hash)) {
    if (field.endsWith(STARTED)) {
      const s = view(field.slice(0, -STARTED.length));
      if (s && s.startedAt === undefined) s.startedAt = Number(raw);
      continue;
    }
    const s = view(field);
    if (!s) continue;
    const stored = JSON.parse(raw) as { v: unknown; e?: string; startedAt?: number; finishedAt?: number; timedOut?: boolean; o?: number };
    s.status = 'done';
    s.value = stored.v;
    if (stored.e) s.streamed = stored.e;
    // A wait's outcome is stored like a step's result: its value, or that it timed out.
    if (stored.timedOut) s.timedOut = true;
    // The result's own times are from one clock (the worker's); a start marker is Redis time.
    if (stored.startedAt !== undefined) s.startedAt = stored.startedAt;
    if (stored.finishedAt !== undefined) s.finishedAt = stored.finishedAt;
    if (typeof stored.o === 'number') place.set(s, stored.o);
  }
  // Hash field order is lost once Redis converts a hash to a hashtable: order by when each step
  // started, then, for steps that started in one millisecond, by the place each stored (results
  // stored before places were, and waits, have none), then by when they finished, then by key.
  const last = Number.MAX_SAFE_INTEGER;
  const byPlace = (a: StepView, b: StepView) => {
    const [pa, pb] = [place.get(a), place.get(b)];
    return pa !== undefined && pb !== undefined ? pa - pb : 0;
  };
  return [...steps.values()].sort((a, b) =>
    (a.startedAt ?? a.finishedAt ?? last) - (b.startedAt ?? b.finishedAt ?? last) ||
    byPlace(a, b) ||
    (a.finishedAt ?? last) - (b.finishedAt ?? last) ||
    (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}
