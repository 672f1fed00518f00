import { BatonApiError, LIMIT_FIELDS, type LimitField, type LimitOverrides, type ScopeLimits } from './api.ts';

/**
 * A scope's limits as the page shows and edits them. The ranges are the API's alone: the page
 * sends what the reader typed and shows the API's answer, so a range is never written twice.
 */

/** What each limit bounds, in the words of docs/tenancy.md. */
export const LIMIT_ABOUT: Record<LimitField, string> = {
  maxActive: 'runs of the scope dispatched or running at once',
  maxActivePerKey: 'runs of one concurrency key active at once',
  submitRatePerSec: 'submits a second (the submit bucket refills at this rate)',
  submitBurst: 'submits at once (the size of the submit bucket)',
  weight: "the scope's weight when scopes contend for the workers' slots",
  maxStreams: 'event streams of the scope open at once, on each API process',
  tokensPerDay: 'model tokens the scope may use in a UTC day',
  readBytesPerSec: 'bytes a second of history pages and listings, past a free allowance per read (the read bucket refills at this rate)',
  readBurstBytes: 'bytes of history pages and listings at once (the size of the read bucket)',
  maxQueuedRuns: 'runs queued and not started at once',
  maxStoredBytes: 'bytes the scope stores: run inputs until they expire, forked histories',
  forksPerMinute: 'forks of sessions a minute',
  forkBytesPerMinute: 'bytes of history forks copy a minute',
  retentionMs: 'ms a finished run stays readable (runs that end after a change)',
};

/** The limits an operator may set to "none" (the API takes null): no per-key cap, no daily budget. */
export const NULLABLE: ReadonlySet<LimitField> = new Set([
  'maxActivePerKey', 'tokensPerDay', 'maxQueuedRuns', 'maxStoredBytes', 'forksPerMinute', 'forkBytesPerMinute',
]);

/** A number as the page writes it: digit groups, up to three decimals (a rate may be 0.5 a second). */
export function formatNumber(n: number): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: 3 });
}

/** A limit's value: null is "none", and so is a submit rate of 0 (only ever a configured default). */
export function formatLimit(field: LimitField, value: number | null | undefined): string {
  if (value === undefined) return '—';
  if (value === null || ((field === 'submitRatePerSec' || field === 'readBytesPerSec') && value === 0)) return 'none';
  return formatNumber(value);
}

/** One field of the edit form: the text typed, or "none" ticked (nullable limits only). */
export interface DraftField { text: string; none: boolean }
export type Draft = Record<LimitField, DraftField>;

/** The form for the operator's overrides `set`: a field not set is empty (its default). */
export function draftOf(set: Partial<ScopeLimits>): Draft {
  const draft = {} as Draft;
  for (const f of LIMIT_FIELDS) {
    const v = set[f];
    draft[f] = { text: v === undefined || v === null ? '' : String(v), none: v === null };
  }
  return draft;
}

export type FieldProblems = Partial<Record<LimitField, string>>;

/**
 * The PUT body of a form: the whole override set, a field left empty being absent (its default
 * applies), "none" being null. Text that is not a number is the only thing checked here; its
 * range is the API's to judge.
 */
export function overridesOf(draft: Draft): { body: LimitOverrides; problems: FieldProblems } {
  const body: Record<string, number | null> = {};
  const problems: FieldProblems = {};
  for (const f of LIMIT_FIELDS) {
    const { text, none } = draft[f];
    if (NULLABLE.has(f) && none) {
      body[f] = null;
      continue;
    }
    const t = text.trim();
    if (t === '') continue;
    const n = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i.test(t) ? Number(t) : NaN;
    if (!Number.isFinite(n)) problems[f] = 'Enter a number, or leave the field empty for the default.';
    else body[f] = n;
  }
  return { body: body as LimitOverrides, problems };
}

/**
 * A refused PUT's failing fields, by limit (the API names them `body.<field>`), and whatever it
 * said of no single limit (an unknown field, a body that is not an object).
 */
export function problemsOf(err: unknown): { fields: FieldProblems; other: string[] } {
  const fields: FieldProblems = {};
  const other: string[] = [];
  if (!(err instanceof BatonApiError)) return { fields, other };
  for (const d of err.details) {
    const field = /^body\.([A-Za-z]+)$/.exec(d.path)?.[1] as LimitField | undefined;
    if (field && (LIMIT_FIELDS as readonly string[]).includes(field)) fields[field] = fields[field] ? `${fields[field]} ${d.message}` : d.message;
    else other.push(`${d.path}: ${d.message}`);
  }
  return { fields, other };
}
