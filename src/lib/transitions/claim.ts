import { flatToObject, type RunRecord } from './record.ts';
import { slotKeys, type ScriptCaller, UNDECODED } from './caller.ts';
import { decode, flag, num, orders, record, strings, text, time, type Replies } from './reply.ts';
import { Outcome, ScriptCode } from './script-codes.ts';

export type ClaimReply =
  | {
    kind: 'claimed'; run: RunRecord; fence: number; recovered: boolean; steps: Record<string, string>; history: string[];
    /** Older messages the agent's memory asked for did not fit HISTORY_READ_MAX_BYTES: `history` is the newest that did. */
    historyCut: boolean;
    /** The end of the run's timeoutMs budget and the claim's time, both Redis time (epoch ms). */
    deadline: number | undefined; now: number;
  }
  /**
   * The claim ended the run instead: cancelled (requested while no live worker held it),
   * expired (its ttlMs passed before it started) or failed (its timeoutMs was used up, or
   * its workers were lost more than MAX_RECOVERIES times: RECOVERY_LIMIT).
   */
  | { kind: 'ended'; status: 'cancelled' | 'expired' | 'failed' }
  /** A live lease holds the run, or its retry is not due: deliver again at `until`. */
  | { kind: 'later'; until: number }
  /** Unknown, finished, queued (a drain parks dispatched runs) or blocked: this delivery has nothing to do. */
  | { kind: 'nothing' };

export const REPLY = {
  Claimed: {
    fence: num, attempt: num, recovered: flag, run: record, steps: strings, history: strings,
    deadline: time, now: num, historyCut: flag,
  },
  /** The claim ended the run instead (cancelled, expired, failed). */
  Ended: { orders, status: text },
  NotFound: {}, NotRunnable: { status: text }, LeaseHeld: { value: num },
} satisfies Replies;

/**
 * Claims a delivered run for `workerId` (claim.lua): a new attempt, or the takeover of an
 * expired lease. `agentDefaults` are this worker's agents' default attempts ({} = none);
 * `historyReads` how many of the session's newest messages to return for each agent (-1
 * all; an agent not named gets none).
 */
export async function claim(
  c: ScriptCaller, job: { scope: string; runId: string }, workerId: string, agentDefaults: Record<string, number>,
  historyReads: Record<string, number> = {},
): Promise<ClaimReply> {
  const sk = c.keys.scope(job.scope);
  const raw = await c.call('claim', UNDECODED, job.scope, slotKeys(sk, job.runId), {
    runId: job.runId, workerId, leaseMs: c.config.LEASE_MS, maxRecoveries: c.config.MAX_RECOVERIES,
    agentDefaults: Object.keys(agentDefaults).length ? agentDefaults : undefined,
    historyReads: Object.keys(historyReads).length ? historyReads : undefined,
    historyBytes: c.config.HISTORY_READ_MAX_BYTES,
  });
  const reply = decode('claim', REPLY, raw);
  if (reply.refused) {
    return reply.refused.code === ScriptCode.LeaseHeld ? { kind: 'later', until: reply.refused.value ?? 0 } : { kind: 'nothing' };
  }
  switch (reply.code) {
    case Outcome.claim.Claimed: {
      if (!reply.run) return { kind: 'nothing' };
      return {
        kind: 'claimed', run: reply.run, fence: reply.fence, recovered: reply.recovered,
        steps: flatToObject(reply.steps), history: reply.history, historyCut: reply.historyCut,
        deadline: reply.deadline, now: reply.now,
      };
    }
    case Outcome.claim.Ended: {
      await c.dispatch(job.scope, reply.orders);
      return { kind: 'ended', status: reply.status as 'cancelled' | 'expired' | 'failed' };
    }
    default:
      return { kind: 'nothing' };
  }
}
