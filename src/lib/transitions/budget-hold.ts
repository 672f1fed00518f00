import { UNDECODED, type ScriptCaller } from './caller.ts';
import { decodeAnswer, num, text, type Replies } from './reply.ts';

/** A model call's hold on its scope's daily token budget (budget-hold.lua). */
export interface BudgetHoldCall {
  /** The UTC day whose usage and holds it counts against. */
  day: string;
  /** TOKENS_PER_DAY: the budget when the scope's limits set none (0: none). */
  defaultLimit: number;
  /** The call's tokens at most; undefined: not known. */
  estimate?: number;
  /** What a call with no estimate holds (at most what is left). */
  unestimated: number;
  /** Unique per call: the hold's name in the day's holds. */
  member: string;
  /** How long the hold lasts unless let go first. */
  holdMs: number;
}

export type BudgetHoldReply =
  | { kind: 'held'; used: number; held: number; limit: number; reserved: number }
  | { kind: 'refused'; used: number; held: number; limit: number }
  | { kind: 'malformed'; field: string }
  | { kind: 'none' };

export const REPLY = {
  Held: { used: num, held: num, limit: num, reserved: num },
  Refused: { used: num, held: num, limit: num },
  Malformed: { field: text },
  NoBudget: {},
} satisfies Replies;

/** Checks a model call against its scope's daily token budget and, when it fits, holds its tokens until released (budget-hold.lua). */
export async function budgetHold(c: ScriptCaller, scope: string, call: BudgetHoldCall): Promise<BudgetHoldReply> {
  const sk = c.keys.scope(scope);
  const { day, ...options } = call;
  const keys = { limits: sk.limits, usage: sk.usage(day), holds: sk.budgetHolds(day) };
  const raw = await c.call('budget-hold', UNDECODED, scope, keys, options);
  const r = decodeAnswer('budget-hold', REPLY, raw);
  switch (r.outcome) {
    case 'Held': return { kind: 'held', used: r.used, held: r.held, limit: r.limit, reserved: r.reserved };
    case 'Refused': return { kind: 'refused', used: r.used, held: r.held, limit: r.limit };
    case 'Malformed': return { kind: 'malformed', field: r.field };
    default: return { kind: 'none' };
  }
}

/** Lets a hold go once its call's tokens are counted (or it made none): one ZREM, no script. */
export async function budgetRelease(c: ScriptCaller, scope: string, day: string, hold: string): Promise<void> {
  await c.redis.zrem(c.keys.scope(scope).budgetHolds(day), hold);
}
