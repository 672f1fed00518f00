import type { ChainableCommander, Redis } from 'ioredis';
import type { Config } from '../config.ts';
import type { Keys, ScopeKeys } from '../keys.ts';
import type { Attempt } from './attempt.ts';
import type { Dispatcher } from './dispatcher.ts';
import { flatToObject, parseRunRecord, type RunRecord } from './record.ts';
import { callScript, queueScript, type NamedKeys, type OptionsJson, type ScriptName } from './scripts.ts';
import { LeaseLostError, ScriptCode, scriptError } from './script-codes.ts';

/**
 * The typed gateway to the Lua transitions (src/lib/engine/lua/): one function per script,
 * named arguments in, a decoded reply out. Nothing else calls a script (`npm test` checks).
 *
 * Each script gets its keys by name and its options as one JSON object (lua/lib.lua says
 * how), so adding a limit touches no positional list. A script that asks for runs to be
 * delivered returns dispatch orders; the gateway hands them to BullMQ before it returns
 * (the outbox step; the sweeper repairs a crash in between), so no caller can forget it.
 */

export type Multitask = 'enqueue' | 'reject' | 'interrupt';

/** A run to accept, with its record fields already encoded. */
export interface NewRun {
  scope: string;
  runId: string;
  sessionId: string;
  runtime: string;
  multitask: Multitask;
  idempotencyKey?: string;
  idempotencyTtlMs: number;
  /** Digest of the request, stored with the idempotency key. */
  requestHash: string;
  /** Record fields (name → value) written with the run. */
  fields: Record<string, string | number>;
}

export type SubmitReply = { created: boolean; runId: string; run: RunRecord | undefined };

export type ClaimReply =
  | { kind: 'claimed'; run: RunRecord; fence: number; recovered: boolean; steps: Record<string, string>; history: string[] }
  /** A cancel was requested while no live worker held the run: the claim finished it as cancelled. */
  | { kind: 'cancelled' }
  /** Its workers were lost more than MAX_RECOVERIES times: the claim failed it (RECOVERY_LIMIT). */
  | { kind: 'recovery-limit' }
  /** A live lease holds the run, or its retry is not due: deliver again at `until`. */
  | { kind: 'later'; until: number }
  /** Its runtime is drained for its scope: the run is parked until resumed. */
  | { kind: 'parked' }
  /** Unknown, finished, queued or blocked: this delivery has nothing to do. */
  | { kind: 'nothing' };

export type CancelReply = { outcome: 'already-finished' | 'cancelled' | 'requested'; run: RunRecord | undefined };

export type HeartbeatReply =
  | { kind: 'renewed'; cancelRequested: boolean }
  /** Another attempt holds the run now (or it is gone). */
  | { kind: 'lost' }
  /** This attempt closed the run itself while the beat was on its way. */
  | { kind: 'closed' }
  | { kind: 'failed'; error: Error };

export type StepWrite =
  | { op: 'start'; stepKey: string }
  | { op: 'done'; stepKey: string; result: string; usage?: StepUsage };

/** The model calls made for a step, counted with its result (once: only if this write stores it). */
export interface StepUsage {
  /** The agent that made them (the run's agent or a sub-agent). */
  agent: string;
  /** When the step finished (ms): its UTC day is the day the scope's usage is counted under. */
  at: number;
  calls: readonly { model: string; inputTokens: number; outputTokens: number }[];
}

/**
 * How long a scope's usage of a day is kept: past the longest range the usage route answers
 * (366 days), and bounded, so a scope's usage keys do not grow forever.
 */
export const USAGE_RETENTION_DAYS = 400;

export type Resolution = { value: unknown } | { rerun: true };

export interface FinishInput {
  status: 'succeeded' | 'failed' | 'cancelled';
  /** The result envelope, JSON text. */
  result: string;
  /** JSON text. */
  lastError?: string;
  /** The turn to commit to the built-in history: [user, assistant] as JSON text. */
  turn?: [string, string];
}

type Raw = unknown[];

export class Transitions {
  /** The limits every script shares, as the start of the options JSON (they never change). */
  private readonly limitsJson: string;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly dispatcher: Dispatcher,
  ) {
    this.limitsJson = JSON.stringify({
      maxLen: config.EVENTS_MAX_LEN,
      maxActive: config.MAX_ACTIVE_PER_SCOPE,
      graceMs: config.DISPATCH_GRACE_MS,
      retention: config.RETENTION_MS,
      cancelChannel: keys.cancelChannel,
    });
  }

  // ---- API side ----

  async submit(r: NewRun): Promise<SubmitReply> {
    const sk = this.keys.scope(r.scope);
    const payload = Object.entries(r.fields).flat();
    const reply = await this.call('submit', r.scope, {
      ...this.slotKeys(sk, r.runId), runs: sk.runs, session: sk.session(r.sessionId),
      sessionRuns: sk.sessionRuns(r.sessionId), idem: r.idempotencyKey === undefined ? undefined : sk.idempotency(r.idempotencyKey),
    }, {
      runId: r.runId, sessionId: r.sessionId, runtime: r.runtime, multitask: r.multitask, idemTtlMs: r.idempotencyTtlMs,
      requestHash: r.requestHash,
    }, payload);
    if (code(reply) < 0) throw scriptError(code(reply), r.runId);
    await this.dispatch(r.scope, reply[3]);
    // An idempotent repeat whose run has passed its retention comes back without a record.
    return { runId: String(reply[1]), created: Number(reply[2]) === 1, run: parseRunRecord(reply[4] as string[]) };
  }

  async cancel(scope: string, runId: string): Promise<CancelReply> {
    const reply = await this.call('cancel', scope, this.slotKeys(this.keys.scope(scope), runId), { runId });
    if (code(reply) < 0) throw scriptError(code(reply), runId);
    await this.dispatch(scope, reply[1]);
    const outcome = (['already-finished', 'cancelled', 'requested'] as const)[code(reply)];
    return { outcome, run: parseRunRecord(reply[2] as string[]) };
  }

  /** Lets a blocked run continue: with the operator's value for the step, or re-running it. */
  async resolve(scope: string, runId: string, stepKey: string, resolution: Resolution): Promise<void> {
    const sk = this.keys.scope(scope);
    const options = 'rerun' in resolution
      ? { runId, stepKey, mode: 'rerun' }
      : { runId, stepKey, mode: 'value', value: JSON.stringify({ v: resolution.value }) };
    const reply = await this.call('resolve', scope, { ...this.slotKeys(sk, runId), steps: sk.steps(runId) }, options);
    if (code(reply) < 0) throw scriptError(code(reply), runId);
    await this.dispatch(scope, reply[1]);
  }

  /** One batch of a drain: sets the flag; with cancelQueued, cancels up to `batch` waiting runs. */
  async drain(scope: string, runtime: string, o: { cancelQueued: boolean; batch: number }): Promise<{ cancelled: number; left: number }> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('drain', scope, {
      drain: sk.drain(runtime), waiting: sk.waiting(runtime), held: sk.held(runtime), ...this.slotKeys(sk),
    }, o);
    // Cancelling a session head hands its scope slot on, possibly to another runtime's run.
    await this.dispatch(scope, reply[2]);
    return { cancelled: Number(reply[0]), left: Number(reply[1]) };
  }

  /** One batch of a resume: `first` lifts the flag; parked heads are admitted in order. */
  async undrain(scope: string, runtime: string, o: { first: boolean; batch: number }): Promise<{ resumed: number; left: number }> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('undrain', scope, { drain: sk.drain(runtime), held: sk.held(runtime), ...this.slotKeys(sk) }, o);
    await this.dispatch(scope, reply[2]);
    return { resumed: Number(reply[0]), left: Number(reply[1]) };
  }

  /** Takes `cost` tokens from a scope's submit bucket, or says when they will be there. */
  async takeTokens(scope: string, o: { rate: number; burst: number; cost: number }): Promise<{ ok: true } | { ok: false; retryAfterMs: number }> {
    const reply = await this.call('rate-limit', scope, { bucket: this.keys.scope(scope).submitBucket }, o);
    return Number(reply[0]) === 1 ? { ok: true } : { ok: false, retryAfterMs: Number(reply[1]) };
  }

  // ---- worker side ----

  /**
   * Claims a delivered run for `workerId`: a new attempt, or the takeover of an expired
   * lease. `agentDefaults` are this worker's agents' default attempts ({} = none).
   */
  async claim(job: { scope: string; runId: string }, workerId: string, agentDefaults: Record<string, number>): Promise<ClaimReply> {
    const sk = this.keys.scope(job.scope);
    const reply = await this.call('claim', job.scope, this.slotKeys(sk, job.runId), {
      runId: job.runId, workerId, leaseMs: this.config.LEASE_MS, maxRecoveries: this.config.MAX_RECOVERIES,
      agentDefaults: Object.keys(agentDefaults).length ? agentDefaults : undefined,
    });
    switch (code(reply)) {
      case 0: {
        const run = parseRunRecord(reply[4] as string[]);
        if (!run) return { kind: 'nothing' };
        return {
          kind: 'claimed', run, fence: Number(reply[1]), recovered: Number(reply[3]) === 1,
          steps: flatToObject(reply[5] as string[]), history: reply[6] as string[],
        };
      }
      case 1:
        await this.dispatch(job.scope, reply[1]);
        return { kind: 'cancelled' };
      case 2:
        await this.dispatch(job.scope, reply[1]);
        return { kind: 'recovery-limit' };
      case ScriptCode.LeaseHeld:
        return { kind: 'later', until: Number(reply[1]) };
      case ScriptCode.Draining:
        // The slot it gave up may have gone to another run.
        await this.dispatch(job.scope, reply[1]);
        return { kind: 'parked' };
      default:
        return { kind: 'nothing' };
    }
  }

  /** Renews the leases of many attempts in one pipeline (one round trip for a whole worker). */
  async heartbeat(attempts: readonly Attempt[]): Promise<HeartbeatReply[]> {
    if (attempts.length === 0) return [];
    const pipe: ChainableCommander = this.redis.pipeline();
    for (const a of attempts) {
      queueScript(pipe, 'heartbeat', { run: a.runKey, leases: a.keys.leases }, this.options(a.keys.base, {
        runId: a.runId, fence: a.fence, leaseMs: this.config.LEASE_MS,
      }));
    }
    let results: [Error | null, unknown][] | null;
    try {
      results = await pipe.exec();
    } catch (err) {
      return attempts.map(() => ({ kind: 'failed', error: err as Error }));
    }
    return attempts.map((_, i) => {
      const [err, reply] = results?.[i] ?? [new Error('no reply'), null];
      if (err || !Array.isArray(reply)) return { kind: 'failed', error: err ?? new Error('malformed heartbeat reply') };
      if (Number(reply[0]) === ScriptCode.NotRunnable) return { kind: 'closed' };
      if (Number(reply[0]) === ScriptCode.LeaseLost) return { kind: 'lost' };
      return { kind: 'renewed', cancelRequested: Number(reply[1]) === 1 };
    });
  }

  /** A fenced lease renewal of one attempt; throws LeaseLostError unless it still holds the run. */
  async assertLease(attempt: Attempt): Promise<void> {
    const [reply] = await this.heartbeat([attempt]);
    if (reply.kind === 'failed') throw reply.error;
    if (reply.kind !== 'renewed') throw new LeaseLostError(attempt.runId);
  }

  /**
   * Records a memoized step's start marker or its result; returns the stored result (first
   * writer wins). A result's usage is counted, for the run and the scope's day, only by the
   * write that stores it.
   */
  async step(attempt: Attempt, write: StepWrite): Promise<string> {
    const usage = write.op === 'done' ? write.usage : undefined;
    const day = usage && new Date(usage.at).toISOString().slice(0, 10);
    const reply = await this.call('step', attempt.scope, {
      run: attempt.runKey, steps: attempt.keys.steps(attempt.runId), usage: day && attempt.keys.usage(day),
    }, usage
      ? { fence: attempt.fence, ...write, usage: { agent: usage.agent, calls: usage.calls }, usageTtlMs: USAGE_RETENTION_DAYS * 86_400_000 }
      : { fence: attempt.fence, ...write });
    if (code(reply) < 0) throw scriptError(code(reply), attempt.runId);
    return String(reply[1]);
  }

  /**
   * Appends numbered batch `batch` of events (type, JSON data) to the run's log; a batch
   * number is applied once. Returns 'duplicate' when this batch had landed already.
   */
  async append(attempt: Attempt, batch: number, events: readonly (readonly [string, string])[]): Promise<'applied' | 'duplicate'> {
    const reply = await this.call('append', attempt.scope, { run: attempt.runKey }, {
      runId: attempt.runId, fence: attempt.fence, batch,
    }, events.flat());
    if (code(reply) < 0) throw scriptError(code(reply), attempt.runId);
    return code(reply) === 1 ? 'duplicate' : 'applied';
  }

  /** The next attempt after a transient failure; returns when it is due. */
  async retry(attempt: Attempt, o: { delayMs: number; lastError: string }): Promise<number> {
    const reply = await this.call('retry', attempt.scope, this.leaseKeys(attempt), {
      runId: attempt.runId, fence: attempt.fence, delayMs: Math.round(o.delayMs), lastError: o.lastError,
    });
    if (code(reply) < 0) throw scriptError(code(reply), attempt.runId);
    await this.dispatch(attempt.scope, reply[2]);
    return Number(reply[1]);
  }

  /** Blocks the run on a non-idempotent step whose outcome is unknown. */
  async block(attempt: Attempt, blocked: { stepKey: string; reason: string; since: number }): Promise<void> {
    const reply = await this.call('block', attempt.scope, this.slotKeys(attempt.keys, attempt.runId), {
      runId: attempt.runId, fence: attempt.fence, blocked: JSON.stringify(blocked),
    });
    if (code(reply) < 0) throw scriptError(code(reply), attempt.runId);
    await this.dispatch(attempt.scope, reply[1]);
  }

  /** Ends the run (and commits its turn to the built-in history, once). */
  async finish(attempt: Attempt, f: FinishInput): Promise<void> {
    const reply = await this.call('finish', attempt.scope, {
      ...this.slotKeys(attempt.keys, attempt.runId), messages: attempt.keys.messages(attempt.sessionId),
    }, { runId: attempt.runId, fence: attempt.fence, ...f });
    if (code(reply) < 0) throw scriptError(code(reply), attempt.runId);
    await this.dispatch(attempt.scope, reply[1]);
  }

  /** Hands the run over at shutdown: its lease ends now and another worker takes it at once. */
  async release(attempt: Attempt): Promise<void> {
    const reply = await this.call('release', attempt.scope, this.leaseKeys(attempt), { runId: attempt.runId, fence: attempt.fence });
    if (code(reply) < 0) throw scriptError(code(reply), attempt.runId);
    await this.dispatch(attempt.scope, reply[1]);
  }

  // ---- sweeper ----

  /** A lease passed its deadline: dispatch a job whose claim takes it over. Returns whether it did. */
  async repairLease(scope: string, runId: string): Promise<boolean> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('repair', scope, { run: sk.run(runId), pending: sk.pending, leases: sk.leases }, { runId, mode: 'lease' });
    return this.dispatch(scope, reply[1]);
  }

  /**
   * A dispatched run's deadline for having a job passed: re-dispatch it unless the job for
   * dispatch number `dispatch` is alive (then only the deadline moves). Returns whether it did.
   */
  async repairPending(scope: string, runId: string, dispatch: number, jobAlive: boolean): Promise<boolean> {
    const sk = this.keys.scope(scope);
    const reply = await this.call('repair', scope, { run: sk.run(runId), pending: sk.pending, leases: sk.leases }, {
      runId, mode: 'pending', dispatch, jobAlive,
    });
    return this.dispatch(scope, reply[1]);
  }

  // ----

  /** The keys of a run and of its scope's slot bookkeeping, which most transitions touch. */
  private slotKeys(sk: ScopeKeys, runId?: string): NamedKeys {
    return { run: runId === undefined ? undefined : sk.run(runId), meta: sk.meta, ready: sk.ready, pending: sk.pending, leases: sk.leases };
  }

  private leaseKeys(a: Attempt): NamedKeys {
    return { run: a.runKey, pending: a.keys.pending, leases: a.keys.leases };
  }

  private async call(
    name: ScriptName, scope: string, keys: NamedKeys, options: Record<string, unknown>, payload?: readonly (string | number)[],
  ): Promise<Raw> {
    return (await callScript(this.redis, name, keys, this.options(this.keys.scope(scope).base, options), payload)) as Raw;
  }

  /** The options argument: shared limits, the scope base and the call's own fields. */
  private options(base: string, own: Record<string, unknown>): OptionsJson {
    const fields = JSON.stringify(own);
    const rest = fields === '{}' ? '}' : `,${fields.slice(1)}`;
    return { json: `${this.limitsJson.slice(0, -1)},"base":${JSON.stringify(base)}${rest}` };
  }

  /** Adds the BullMQ jobs a transition asked for; returns whether there were any. */
  private async dispatch(scope: string, orders: unknown): Promise<boolean> {
    const text = String(orders);
    // Lua's cjson encodes an empty list as `{}`.
    if (text === '[]' || text === '{}') return false;
    await this.dispatcher.dispatch(scope, text);
    return true;
  }
}

function code(reply: Raw): number {
  return Number(reply[0]);
}
