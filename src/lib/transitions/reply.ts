import { parseRunRecord, type RunRecord } from './record.ts';
import { Outcome, outcomeGroup, ScriptCode, type Refusal } from './script-codes.ts';
import type { ScriptName } from './scripts.ts';
import type { WaitKind } from '../contract/runs.ts';

// ---- replies ----
// A script answers a positional list (the wire format): most start with a code, a refusal
// (ScriptCode, negative) or the script's outcome (Outcome), then that outcome's fields. Each
// unit (<name>.ts) declares its script's replies once, as its `REPLY`, by outcome name, each
// with its fields in the order the script returns them and how each is decoded: the same
// lists, by the same names, as the `-- @reply` lines of its <name>.lua beside it
// (scripts/check-lua.mjs fails when the two disagree). A reply without a code (drain,
// fork-scan, ...) is declared under ''. Every unit reads the decoded object by field name: the
// fields of the outcome answered, each other outcome's as their empty value (no unit reads them).

export const num = (v: unknown): number => Number(v);
export const text = (v: unknown): string => (v === undefined ? '' : String(v));
export const flag = (v: unknown): boolean => Number(v) === 1;
export const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : []);
/** A run record as HGETALL lists it; undefined when the run is gone. */
export const record = (v: unknown): RunRecord | undefined => (Array.isArray(v) ? parseRunRecord(v.map(String)) : undefined);
/** Dispatch orders, JSON text for the dispatcher (none when left out). */
export const orders = (v: unknown): string => (v === undefined ? '[]' : String(v));
/** A wait that stopped pending with an outcome, for the wait-duration histogram. */
export interface AnsweredWait { key?: string; kind: WaitKind; since: number }
/** A JSON list a script encoded (cjson encodes an empty one as `{}`). */
export const answered = (v: unknown): AnsweredWait[] => {
  if (v === undefined) return [];
  const list: unknown = JSON.parse(String(v));
  return Array.isArray(list) ? (list as AnsweredWait[]) : [];
};
/** An epoch ms, 0 for none. */
export const time = (v: unknown): number | undefined => (Number(v) > 0 ? Number(v) : undefined);
export const numbers = (v: unknown): number[] => (Array.isArray(v) ? v.map(Number) : []);

export type Shape = Record<string, (v: unknown) => unknown>;
/** A transition's replies: outcome (or refusal) name -> its fields after the code; '' a reply without a code. */
export type Replies = Record<string, Shape>;

type RefusalName = keyof typeof ScriptCode;
type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
type Fields<S> = { [F in keyof S]: S[F] extends (v: unknown) => infer T ? T : never };
export type Outcomes<R> = Exclude<keyof R, RefusalName | ''> & string;
/** A reply's answer: a coded one names its outcome and carries every outcome's fields (those of others empty). */
export type Answer<R> = '' extends keyof R
  ? Fields<R['' & keyof R]>
  : { outcome: Outcomes<R>; code: number } & Fields<UnionToIntersection<R[Outcomes<R>]>>;
/** A decoded reply: a refusal (only a coded reply can be one) or the script's answer. */
export type Reply<R> = '' extends keyof R
  ? Answer<R>
  : ({ refused?: undefined } & Answer<R>) | { refused: Refusal };

/** The fields of `shape` from `raw`, starting at position `at`. */
function fieldsOf(shape: Shape, raw: unknown[], at: number): Record<string, unknown> {
  return Object.fromEntries(Object.keys(shape).map((field, i) => [field, shape[field](raw[at + i])]));
}

/**
 * The one place a reply's positions are read: `replies` is the unit's REPLY. `among`
 * (optional): the outcomes the call may answer, when several of the script's share a code
 * (rate-bucket's ops).
 */
export function decode<R extends Replies>(name: ScriptName, replies: R, raw: unknown, among?: readonly Outcomes<R>[]): Reply<R> {
  if (!Array.isArray(raw)) throw new Error(`the ${name} script answered ${typeof raw}, not a list`);
  if ('' in replies) return fieldsOf(replies[''], raw, 0) as Reply<R>;
  const code = Number(raw[0]);
  const group: Record<string, number> = (Outcome as Record<string, Record<string, number>>)[outcomeGroup(name)] ?? {};
  const codes: Record<string, number> = ScriptCode;
  const allowed = (outcome: string) => !among || (among as readonly string[]).includes(outcome) || outcome in codes;
  const names = Object.keys(replies).filter((outcome) => (outcome in codes ? codes[outcome] : group[outcome]) === code && allowed(outcome));
  if (names.length !== 1) throw new Error(`the ${name} script answered the unexpected code ${code}`);
  const outcome = names[0];
  if (outcome in codes) return { refused: { code, ...fieldsOf(replies[outcome], raw, 1) } as Refusal } as Reply<R>;
  const answer: Record<string, unknown> = { outcome, code };
  for (const [other, shape] of Object.entries(replies)) {
    if (other !== outcome && !(other in codes)) Object.assign(answer, fieldsOf(shape, [], 0));
  }
  return Object.assign(answer, fieldsOf(replies[outcome], raw, 1)) as Reply<R>;
}

/** A reply that is never a refusal. */
export function decodeAnswer<R extends Replies>(name: ScriptName, replies: R, raw: unknown, among?: readonly Outcomes<R>[]): Answer<R> {
  const reply = decode(name, replies, raw, among) as Reply<R> & { refused?: Refusal };
  if (reply.refused) throw new Error(`the ${name} reply was a refusal (${reply.refused.code})`);
  return reply as Answer<R>;
}

/** The refusal of a script whose only one is NOT_FOUND (a schedule's or an operation's hash is gone). */
export function notFound(name: ScriptName, refusal: Refusal): 'not-found' {
  if (refusal.code === ScriptCode.NotFound) return 'not-found';
  throw new Error(`the ${name} script answered the unexpected code ${refusal.code}`);
}

/** A refusal where the script has none to give: a bug, said so. */
export function unexpected(name: ScriptName, refusal: Refusal): never {
  throw new Error(`the ${name} script answered the unexpected code ${refusal.code}`);
}
