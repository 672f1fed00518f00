import type { Config } from '../config/index.ts';
import type { ApiGateway } from '../transitions/api-gateway.ts';
import { BatonError } from '../errors.ts';
import { LIMITS_CACHE_MS } from './limits.ts';

/** Scopes in debt one process remembers at once; past it the memory starts over (a bounded working set). */
const REMEMBERED_MAX = 10_000;

/**
 * A scope's budget of costly reads: a session's history pages and the listings (runs, a run's
 * steps, usage, schedules, bulk operations), whose answers reach PAGE_MAX_BYTES each and whose
 * cost to Redis and to the API process grows with their bytes. Counting requests would not
 * bound that: four readers of 3.5 MB history pages took 17 MB/s, and another scope's whoami
 * went from 5 ms to 160 ms at the median.
 *
 * The budget is a token bucket of bytes in Redis (transitions/read-cost.lua), so every API process
 * shares it: the scope's `readBytesPerSec` and `readBurstBytes` limits, else READ_BYTES_PER_SEC
 * and READ_BURST_BYTES. A read's cost is known only once it is made, so it is charged after:
 * the bytes of its answer past READ_FREE_BYTES, as the answer is sent, and the bucket may
 * go into debt. While it is in debt, the scope's costly reads are refused with 429
 * READ_RATE_LIMITED (Retry-After: when it is out of debt) before they read anything.
 *
 * One round trip at most per read: a read within the free allowance (a chat page of its last
 * 50 messages) is not charged and touches Redis for nothing; a larger one makes one call, the
 * charge, whose answer tells this process how long the scope is in debt. The refusal is
 * decided from that answer, in this process: so each process lets the reads through that
 * started before one of its own charges found the debt, and a process that has not charged
 * the scope since the debt began finds it at its next costly read. Every byte served is
 * charged all the same, so over time the scope reads at its rate; in any window, what passes
 * beyond burst + rate × window is the reads in flight when the bucket ran dry, each at most
 * a page. A process that refuses a scope looks at its bucket again (a look writes nothing)
 * once its answer is LIMITS_CACHE_MS old: an operator's change of the scope's read limits
 * applies to a scope being refused within it, as other limits' changes do.
 */
export class ReadBudget {
  /** Until when (this process's clock, epoch ms) each scope's costly reads are refused, and when that was last read from Redis. */
  private readonly refused = new Map<string, { until: number; readAt: number }>();
  private readonly limit: { rate: number; burst: number };
  private readonly free: number;

  constructor(
    private readonly transitions: ApiGateway,
    config: Pick<Config, 'READ_FREE_BYTES' | 'READ_BYTES_PER_SEC' | 'READ_BURST_BYTES'>,
    /** The scope's readBytesPerSec in force, as this process last read its limits (ScopeLimitStore.limits). */
    private readonly rateOf: (scope: string) => Promise<number>,
  ) {
    this.limit = { rate: config.READ_BYTES_PER_SEC, burst: config.READ_BURST_BYTES };
    this.free = config.READ_FREE_BYTES;
  }

  /** Before a costly read: refuses it (429 READ_RATE_LIMITED, nothing read) while the scope's budget is in debt. */
  async admit(scope: string): Promise<void> {
    const entry = this.refused.get(scope);
    if (!entry) return;
    const now = Date.now();
    if (entry.until <= now) {
      this.refused.delete(scope);
      return;
    }
    if (now - entry.readAt >= LIMITS_CACHE_MS) {
      // One look a second, however many reads are refused meanwhile.
      entry.readAt = now;
      this.remember(scope, (await this.transitions.scope(scope).chargeRead(0, this.limit)).retryAfterMs);
    }
    const waitMs = (this.refused.get(scope)?.until ?? 0) - Date.now();
    if (waitMs <= 0) return;
    throw new BatonError('READ_RATE_LIMITED', undefined, [
      { path: 'scope', message: `the scope's costly reads passed its read budget (readBytesPerSec, readBurstBytes); retry in ${waitMs} ms` },
    ], { retryAfterMs: waitMs });
  }

  /** After a costly read, as its answer is sent: charges the answer's `bytes` past the free allowance. */
  async charge(scope: string, bytes: number): Promise<void> {
    const over = bytes - this.free;
    if (over <= 0) return;
    // No budget (READ_BYTES_PER_SEC 0 and no override of the scope's): nothing to charge, and no
    // round trip. A charge awaited after each large answer raised an API process's peak RSS by
    // about 100 MiB under test/bytes-limits.test.ts's aborted listings, which run without a budget.
    if ((await this.rateOf(scope)) === 0) return;
    this.remember(scope, (await this.transitions.scope(scope).chargeRead(over, this.limit)).retryAfterMs);
  }

  private remember(scope: string, retryAfterMs: number): void {
    if (retryAfterMs <= 0) {
      this.refused.delete(scope);
      return;
    }
    if (this.refused.size >= REMEMBERED_MAX) this.refused.clear();
    const now = Date.now();
    this.refused.set(scope, { until: now + retryAfterMs, readAt: now });
  }
}
