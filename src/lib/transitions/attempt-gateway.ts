import type { Attempt } from './attempt.ts';
import { appendMany, type AppendAnswer, type AppendItem } from './append.ts';
import { block } from './block.ts';
import type { ScriptCaller } from './caller.ts';
import { claim, type ClaimReply } from './claim.ts';
import { finish, type FinishInput } from './finish.ts';
import { heartbeat, type HeartbeatReply } from './heartbeat.ts';
import { release } from './release.ts';
import { retry } from './retry.ts';
import { LeaseLostError, type Fenced } from './script-codes.ts';
import { steer, type TakenSteering } from './steer.ts';
import { step, type StepWrite } from './step.ts';
import { wait, type ParkReply, type WaitRequest } from './wait.ts';

type Events = readonly (readonly [string, string])[];

/**
 * The worker's transitions: the claim that makes an attempt, the heartbeat that keeps many
 * attempts' leases, the appends of many runs' events in one call, and `of(attempt)`, the
 * gateway one attempt writes through.
 */
export class WorkerGateway {
  constructor(private readonly c: ScriptCaller) {}

  claim(
    job: { scope: string; runId: string }, workerId: string, agentDefaults: Record<string, number>,
    historyReads: Record<string, number> = {},
  ): Promise<ClaimReply> {
    return claim(this.c, job, workerId, agentDefaults, historyReads);
  }
  heartbeat(attempts: readonly Attempt[]): Promise<HeartbeatReply[]> { return heartbeat(this.c, attempts); }
  appendMany(items: readonly AppendItem[]): Promise<(AppendAnswer | LeaseLostError)[]> { return appendMany(this.c, items); }
  /**
   * Appends numbered batch `batch` of events (type, JSON data) to the run's log; a batch
   * number is applied once. Returns 'duplicate' when this batch had landed already.
   */
  async append(attempt: Attempt, batch: number, events: Events): Promise<AppendAnswer> {
    const [reply] = await appendMany(this.c, [{ attempt, batch, events }]);
    if (reply instanceof Error) throw reply;
    return reply;
  }
  /** The gateway of one attempt: every write of it fenced by its fence. */
  of(attempt: Attempt): AttemptGateway { return new AttemptGateway(this.c, attempt); }
}

/**
 * One attempt's transitions: it holds the attempt (run, fence, keys), so no call can name
 * another's. A closing transition (retry, block, wait, release, finish) answers a lost lease as
 * the value `{ kind: 'lost' }` (close.ts makes it the outcome lease-lost); a step, a steer and
 * assertLease, called from inside the agent's part, throw LeaseLostError, which ends that part.
 */
export class AttemptGateway {
  constructor(private readonly c: ScriptCaller, readonly attempt: Attempt) {}

  step(write: StepWrite): Promise<string> { return step(this.c, this.attempt, write); }
  steer(sessionId: string, boundary: number): Promise<{ taken: TakenSteering; fresh: boolean }> {
    return steer(this.c, this.attempt, sessionId, boundary);
  }
  retry(o: { delayMs: number; lastError: string }): Promise<Fenced<number>> { return retry(this.c, this.attempt, o); }
  block(blocked: { stepKey: string; reason: string; since: number }): Promise<Fenced<void>> {
    return block(this.c, this.attempt, blocked);
  }
  finish(f: FinishInput, last?: { no: number; events: Events }): Promise<Fenced<{ notDelivered: number }>> {
    return finish(this.c, this.attempt, f, last);
  }
  release(): Promise<Fenced<void>> { return release(this.c, this.attempt); }
  wait(waits: readonly WaitRequest[]): Promise<Fenced<ParkReply>> { return wait(this.c, this.attempt, waits); }
  /** A fenced lease renewal of this attempt; throws LeaseLostError unless it still holds the run. */
  async assertLease(): Promise<void> {
    const [reply] = await heartbeat(this.c, [this.attempt]);
    if (reply.kind === 'failed') throw reply.error;
    if (reply.kind !== 'renewed') throw new LeaseLostError(this.attempt.runId);
  }
}
