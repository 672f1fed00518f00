import type { Redis } from 'ioredis';
import type { Config } from '../config.ts';
import type { Keys } from '../keys.ts';
import { RUN_LIMIT_CODES, type TokenBudget } from '../contract/index.ts';
import { PermanentError } from '../sdk/errors.ts';

const DAY_MS = 86_400_000;

/** The UTC day (YYYY-MM-DD) of epoch ms `ms`: the day whose usage hash a model call counts in. */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The first ms of the UTC day after the one `ms` falls in: when a day's budget is whole again. */
export const nextUtcMidnight = (ms: number): number => (Math.floor(ms / DAY_MS) + 1) * DAY_MS;

/**
 * The rule a model call is checked by: refused when the scope's tokens of today (input and
 * output, as providers reported them) plus the call's estimate would pass the budget. A call
 * with no estimate is refused only once the budget is used up (`usedToday >= tokensPerDay`).
 */
export function budgetRefuses(usedToday: number, tokensPerDay: number, estimate?: number): boolean {
  return estimate === undefined ? usedToday >= tokensPerDay : usedToday + estimate > tokensPerDay;
}

/** What a check found: the call may be made, or it would pass the budget (`never`: even a whole day's budget would not fit it). */
export type BudgetCheck =
  | { allowed: true }
  | { allowed: false; budget: TokenBudget; estimate?: number; never: boolean };

/**
 * The model call refused by the scope's budget; permanent (a retry within the day would be
 * refused again). `errors` becomes the run's `lastError.details`.
 */
export class BudgetExceededError extends PermanentError {
  readonly errors: [{ tokensPerDay: number; usedToday: number; estimate: number | null; resetsAt: string }];
  constructor(stepKey: string, check: Extract<BudgetCheck, { allowed: false }>, why: string) {
    const { budget, estimate } = check;
    super(
      `${stepKey} was not made: the scope used ${budget.usedToday} of its ${budget.tokensPerDay} tokens today (UTC)` +
      `${estimate === undefined ? '' : ` and the call is estimated at ${estimate}`}; ${why}`,
      RUN_LIMIT_CODES.BUDGET_EXCEEDED,
    );
    this.name = 'BudgetExceededError';
    const { tokensPerDay, usedToday, resetsAt } = budget;
    this.errors = [{ tokensPerDay, usedToday, estimate: estimate ?? null, resetsAt }];
  }
}

/**
 * A scope's daily token budget (its `tokensPerDay` limit: the field of the scope's limits
 * hash an operator sets, else TOKENS_PER_DAY; 0 = none), checked by the worker before each
 * model call that is not answered from the memo (ContextState, before the call's body runs).
 *
 * One read per check: the limit field and today's total (the `tokens` field the step script
 * keeps in the scope's usage hash of the day), pipelined in one round trip to the scope's
 * slot. Nothing is reserved: calls of one scope checked at the same moment can each pass and
 * together overshoot the budget by at most what they use. A reservation would make the
 * check exact, at the price of a settle after every call and of reservations a crashed worker
 * leaves behind (to expire by some timeout); a daily budget is a spending cap, where an
 * overshoot bounded by the scope's calls in flight (at most its active runs' concurrent calls)
 * is the better trade.
 */
export class TokenBudgets {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'TOKENS_PER_DAY'>,
    /** The clock days are told by: the worker's, as the step script's usage days are. */
    private readonly now: () => number = Date.now,
  ) {}

  /** The scope's budget and what is left of it today, or null when it has none. */
  async status(scope: string): Promise<TokenBudget | null> {
    const now = this.now();
    const sk = this.keys.scope(scope);
    const replies = await this.redis.pipeline().hget(sk.limits, 'tokensPerDay').hget(sk.usage(utcDay(now)), 'tokens').exec();
    for (const [err] of replies ?? []) if (err) throw err;
    const [limit, used] = (replies ?? []).map(([, v]) => v as string | null);
    const tokensPerDay = limit === null || limit === undefined ? this.config.TOKENS_PER_DAY : wholeNumber(limit, scope);
    if (tokensPerDay === 0) return null;
    const usedToday = Number(used ?? 0);
    return {
      tokensPerDay, usedToday, left: Math.max(0, tokensPerDay - usedToday), resetsAt: new Date(nextUtcMidnight(now)).toISOString(),
    };
  }

  /** Whether a model call of `estimate` tokens (undefined: not known) may be made now. */
  async check(scope: string, estimate?: number): Promise<BudgetCheck> {
    const budget = await this.status(scope);
    if (!budget || !budgetRefuses(budget.usedToday, budget.tokensPerDay, estimate)) return { allowed: true };
    return { allowed: false, budget, estimate, never: estimate !== undefined && estimate > budget.tokensPerDay };
  }
}

/**
 * A limit field as the limits route writes it: decimal digits. Anything else was written
 * around the route; the budget then refuses the call (fails closed, naming the field) rather
 * than reading it as no budget.
 */
function wholeNumber(text: string, scope: string): number {
  if (!/^\d{1,15}$/.test(text)) {
    throw new PermanentError(
      `the tokensPerDay limit of scope ${scope} is ${JSON.stringify(text)}, not a whole number of tokens: model calls are refused until it is`,
      RUN_LIMIT_CODES.BUDGET_EXCEEDED,
    );
  }
  return Number(text);
}
