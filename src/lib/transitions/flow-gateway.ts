import { budgetHold, budgetRelease, type BudgetHoldCall, type BudgetHoldReply } from './budget-hold.ts';
import type { ScriptCaller } from './caller.ts';
import { rateBucket, type RateBucketCall, type RateBucketReply } from './rate-bucket.ts';

/** Flow control's transitions: providers' rate-limit buckets (rate-limiter.ts) and daily token budgets (budgets.ts). */
export class FlowGateway {
  constructor(private readonly c: ScriptCaller) {}

  rateBucket(bucket: string, windowMs: number, call: RateBucketCall): Promise<RateBucketReply> {
    return rateBucket(this.c, bucket, windowMs, call);
  }
  budgetHold(scope: string, call: BudgetHoldCall): Promise<BudgetHoldReply> { return budgetHold(this.c, scope, call); }
  budgetRelease(scope: string, day: string, hold: string): Promise<void> { return budgetRelease(this.c, scope, day, hold); }
}
