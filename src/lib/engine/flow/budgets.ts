import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from '../../config/index.ts';
import type { Keys } from '../../keys.ts';
import { RUN_LIMIT_CODES, type TokenBudget } from '../../contract/index.ts';
import { PermanentError } from '../../sdk/errors.ts';
import type { FlowGateway } from '../../transitions/flow-gateway.ts';

const DAY_MS = 86_400_000;

/** The UTC day (YYYY-MM-DD) of epoch ms `ms`: the day whose usage hash a model call counts in. */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The first ms of the UTC day after the one `ms` falls in: when a day's budget is whole again. */
export const nextUtcMidnight = (ms: number): number => (Math.floor(ms / DAY_MS) + 1) * DAY_MS;

/**
 * The rule a model call is checked by: refused when the scope's tokens of today (input and
 * output, as providers reported them), plus the holds of its calls in flight, plus the call's
 * estimate would pass the budget. A call with no estimate is refused only once nothing is left
 * (`usedToday + held >= tokensPerDay`), and holds TOKENS_UNESTIMATED of what is. The check and
 * the hold are one step of transitions/budget-hold.lua; this is the same rule, for reading.
 */
export function budgetRefuses(usedToday: number, tokensPerDay: number, estimate?: number, held = 0): boolean {
  return estimate === undefined ? usedToday + held >= tokensPerDay : usedToday + held + estimate > tokensPerDay;
}

/**
 * How long a call's hold lasts unless its call lets it go first: past the longest a model call
 * runs (a stream of a long answer, its rate-limit wait before it), so a hold lapses on its own
 * only when its worker died in the call. A call still running then counts when it ends, as a
 * call with no hold would.
 */
export const BUDGET_HOLD_MS = 15 * 60_000;

/** A model call's hold on its scope's budget, to let go once the call's tokens are counted. */
export interface BudgetHold { scope: string; day: string; member: string; tokens: number }

/** What a check found: the call may be made, or it would pass the budget (`never`: even a whole day's budget would not fit it). */
export type BudgetCheck =
  | { allowed: true; hold?: BudgetHold }
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
 * The check holds what the call may use (its estimate; without one, TOKENS_UNESTIMATED) in
 * the same atomic step (transitions/budget-hold.lua), until the call's tokens are counted by the step
 * script; calls of one scope checked at the same moment see each other's holds, so calls
 * whose estimates are right never take the scope past its budget together. What a budget can
 * still be overshot by is what calls use beyond what they held: over the calls admitted
 * before the budget ran out, the sum of (tokens used − tokens held); at most the scope's
 * calls in flight (its active runs, `maxActive`, times the calls each makes at once) times
 * the largest such excess (docs/tenancy.md#token-budgets). A hold a crashed worker left behind
 * lapses after BUDGET_HOLD_MS, and only makes the budget stricter until then.
 */
export class TokenBudgets {
  private readonly now: () => number;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'TOKENS_PER_DAY'> & Partial<Pick<Config, 'TOKENS_UNESTIMATED'>>,
    /**
     * The holds' gateway: without it (a reader of the budget, UsageReader) check() cannot be
     * called. `now`: the clock days are told by: the worker's, as the step script's usage days are.
     */
    private readonly o: { transitions?: FlowGateway; now?: () => number } = {},
  ) {
    this.now = o.now ?? Date.now;
  }

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
    return budgetOf(tokensPerDay, usedToday, now);
  }

  /**
   * Whether a model call of `estimate` tokens (undefined: not known) may be made now; when it
   * may and the scope has a budget, what the call holds of it (release() once it is counted).
   * `call`: names the hold (the run and the step), unique per call.
   */
  async check(scope: string, estimate: number | undefined, call: string): Promise<BudgetCheck> {
    const transitions = this.o.transitions;
    if (!transitions) throw new Error('TokenBudgets.check needs the transitions gateway');
    const now = this.now();
    const day = utcDay(now);
    const member = `${call}:${randomBytes(4).toString('hex')}`;
    const reply = await transitions.budgetHold(scope, {
      day, defaultLimit: this.config.TOKENS_PER_DAY, estimate, unestimated: this.config.TOKENS_UNESTIMATED ?? 0,
      member, holdMs: BUDGET_HOLD_MS,
    });
    switch (reply.kind) {
      case 'none': return { allowed: true };
      case 'malformed': throw malformed(reply.field, scope);
      case 'held': return { allowed: true, hold: { scope, day, member: `${member}:${reply.reserved}`, tokens: reply.reserved } };
      case 'refused': {
        const budget = budgetOf(reply.limit, reply.used, now);
        return { allowed: false, budget, estimate, never: estimate !== undefined && estimate > budget.tokensPerDay };
      }
    }
  }

  /** Lets a call's hold go: its tokens are counted in today's usage now, or it made none. */
  async release(hold: BudgetHold): Promise<void> {
    await this.o.transitions?.budgetRelease(hold.scope, hold.day, hold.member);
  }
}

function budgetOf(tokensPerDay: number, usedToday: number, now: number): TokenBudget {
  return { tokensPerDay, usedToday, left: Math.max(0, tokensPerDay - usedToday), resetsAt: new Date(nextUtcMidnight(now)).toISOString() };
}

/**
 * A limit field as the limits route writes it: decimal digits. Anything else was written
 * around the route; the budget then refuses the call (fails closed, naming the field) rather
 * than reading it as no budget.
 */
function wholeNumber(text: string, scope: string): number {
  if (!/^\d{1,15}$/.test(text)) throw malformed(text, scope);
  return Number(text);
}

function malformed(text: string, scope: string): PermanentError {
  return new PermanentError(
    `the tokensPerDay limit of scope ${scope} is ${JSON.stringify(text)}, not a whole number of tokens: model calls are refused until it is`,
    RUN_LIMIT_CODES.BUDGET_EXCEEDED,
  );
}
