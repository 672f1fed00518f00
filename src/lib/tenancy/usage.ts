import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';
import type { Config, ModelPrice } from '../config/index.ts';
import { BatonError } from '../errors.ts';
import type { ScopeUsage, UsageRow } from '../contract/admin.ts';
import type { ModelUsage, RunUsage, UsageTotals } from '../contract/runs.ts';
import { TokenBudgets } from '../engine/flow/budgets.ts';

const DAY_MS = 86_400_000;

/** A page of usage rows: at most `limit` rows and `maxBytes` bytes of them; `cursor` is a nextCursor. */
export interface UsagePageOptions { limit: number; cursor?: string; maxBytes: number }

/** Days read per round trip (one pipeline): a month of a quiet scope in one. */
const DAYS_PER_READ = 31;

/**
 * A scope's model usage from day `from` to day `to` (YYYY-MM-DD, UTC, inclusive), by day,
 * agent and model, as the step script counted it (transitions/step.lua: one hash per day under the
 * scope's tag, fields `in|out|calls:<agent>:<model>`). Reads only the path's scope's keys;
 * the caller bounds the range. A page holds at most `limit` rows and `maxBytes` bytes of them
 * (its first row whatever its size), read a few days at a time and no further than the page
 * needs; `total` sums the page's rows (the range's when the page is the only one), and
 * `nextCursor` (`<day>.<row of that day>`) is where the next page starts.
 */
export async function scopeUsage(
  redis: Redis, keys: Keys, scope: string, from: string, to: string, o: UsagePageOptions,
): Promise<Omit<ScopeUsage, 'budget'>> {
  const sk = keys.scope(scope);
  const at = o.cursor ? parseUsageCursor(o.cursor) : { day: from, row: 0 };
  const days: string[] = [];
  for (let t = Math.max(Date.parse(from), Date.parse(at.day)); t <= Date.parse(to); t += DAY_MS) {
    days.push(new Date(t).toISOString().slice(0, 10));
  }

  const rows: UsageRow[] = [];
  const total = zero();
  let bytes = 0;
  let nextCursor: string | null = null;
  read: for (let d = 0; d < days.length; d += DAYS_PER_READ) {
    const batch = days.slice(d, d + DAYS_PER_READ);
    // One round trip per batch: every day's hash is in the scope's slot.
    const pipe = redis.pipeline();
    for (const day of batch) pipe.hgetall(sk.usage(day));
    const replies = (await pipe.exec()) ?? [];
    for (let i = 0; i < batch.length; i++) {
      const [err, hash] = replies[i] ?? [new Error('no reply'), null];
      if (err) throw err;
      const day = batch[i];
      const sorted = dayRows(day, (hash ?? {}) as Record<string, string>);
      for (let r = day === at.day ? at.row : 0; r < sorted.length; r++) {
        const row = sorted[r];
        const size = JSON.stringify(row).length + 1;
        if (rows.length === o.limit || (rows.length > 0 && bytes + size > o.maxBytes)) {
          nextCursor = `${day}.${r}`;
          break read;
        }
        bytes += size;
        add(total, row);
        rows.push(row);
      }
    }
  }
  return { scope, from, to, rows, total, nextCursor };
}

/** A day's rows, by agent then model. */
function dayRows(day: string, hash: Record<string, string>): UsageRow[] {
  const byCall = new Map<string, UsageRow>();
  for (const [field, value] of Object.entries(hash)) {
    const m = /^(in|out|calls):([^:]+):(.*)$/s.exec(field);
    if (!m) continue;
    const [, kind, agent, model] = m;
    const id = `${agent}:${model}`;
    let row = byCall.get(id);
    if (!row) byCall.set(id, (row = { day, agent, model, ...zero() }));
    const n = Number(value);
    if (kind === 'in') row.inputTokens += n;
    else if (kind === 'out') row.outputTokens += n;
    else row.modelCalls += n;
  }
  const sorted = [...byCall.values()].sort((a, b) => compare(a.agent, b.agent) || compare(a.model, b.model));
  for (const row of sorted) row.totalTokens = row.inputTokens + row.outputTokens;
  return sorted;
}

/** `<YYYY-MM-DD>.<row>`: the day and the place in it (by agent, then model) of the next page's first row. */
function parseUsageCursor(cursor: string): { day: string; row: number } {
  const [day, row] = cursor.split('.');
  return { day, row: Number(row) };
}

const zero = (): UsageTotals => ({ inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: 0 });

function add(into: UsageTotals, u: UsageTotals): void {
  into.inputTokens += u.inputTokens;
  into.outputTokens += u.outputTokens;
  into.totalTokens += u.totalTokens;
  into.modelCalls += u.modelCalls;
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** A price table as MODEL_PRICES gives it: USD per million tokens, by model id. */
export type PriceTable = Readonly<Record<string, ModelPrice>>;

/**
 * A run's model usage so far (transitions/step.lua counts it in the run record: the totals in
 * usageIn/usageOut/usageCalls, the same by model in usageModels), priced by `prices` when
 * given. The run's cost is given only when every model it called has a price: a sum that
 * left some calls out would read as the whole cost. Undefined when there is no such run.
 */
export async function runUsage(redis: Redis, keys: Keys, scope: string, runId: string, prices?: PriceTable): Promise<RunUsage | undefined> {
  const [status, input, output, calls, byModel] = await redis.hmget(
    keys.scope(scope).run(runId), 'status', 'usageIn', 'usageOut', 'usageCalls', 'usageModels',
  );
  if (!status) return undefined;
  const total = totals(Number(input ?? 0), Number(output ?? 0), Number(calls ?? 0));
  const counted = JSON.parse(byModel ?? '{}') as Record<string, [number, number, number]>;
  let cost = 0;
  const unpriced: string[] = [];
  const models = Object.keys(counted).sort(compare).map((model): ModelUsage => {
    const u = totals(...counted[model]);
    const price = prices && Object.hasOwn(prices, model) ? prices[model] : undefined;
    if (!price) {
      unpriced.push(model);
      return { model, ...u };
    }
    const c = (u.inputTokens * price.inputPerMTokens + u.outputTokens * price.outputPerMTokens) / 1e6;
    cost += c;
    return { model, ...u, costUsd: roundUsd(c) };
  });
  const usage: RunUsage = { runId, total, models };
  if (!prices) return usage;
  // Calls counted before the record kept them by model are in the totals only: no cost then either.
  const complete = models.reduce((n, m) => n + m.modelCalls, 0) === total.modelCalls;
  if (unpriced.length) usage.unpriced = unpriced;
  else if (complete) usage.costUsd = roundUsd(cost);
  return usage;
}

const totals = (inputTokens: number, outputTokens: number, modelCalls: number): UsageTotals => ({
  inputTokens, outputTokens, totalTokens: inputTokens + outputTokens, modelCalls,
});

/** To a billionth of a dollar: a token costs about a millionth, and float sums leave dust (0.30000000000000004). */
const roundUsd = (usd: number): number => Math.round(usd * 1e9) / 1e9;

/**
 * Usage as the API shows it: a scope's by day (pages of at most PAGE_MAX_BYTES, less the
 * answer's envelope) with its daily token budget today, and a run's priced by MODEL_PRICES
 * (RUN_NOT_FOUND when there is no such run).
 */
export class UsageReader {
  private readonly budgets: TokenBudgets;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'PAGE_MAX_BYTES' | 'MODEL_PRICES' | 'TOKENS_PER_DAY'>,
  ) {
    this.budgets = new TokenBudgets(redis, keys, config);
  }

  async scope(scope: string, from: string, to: string, page: { limit: number; cursor?: string }): Promise<ScopeUsage> {
    const [usage, budget] = await Promise.all([
      scopeUsage(this.redis, this.keys, scope, from, to, { ...page, maxBytes: this.config.PAGE_MAX_BYTES - 512 }),
      this.budgets.status(scope),
    ]);
    return { ...usage, budget };
  }

  async run(scope: string, runId: string): Promise<RunUsage> {
    const usage = await runUsage(this.redis, this.keys, scope, runId, this.config.MODEL_PRICES);
    if (!usage) throw new BatonError('RUN_NOT_FOUND');
    return usage;
  }
}
