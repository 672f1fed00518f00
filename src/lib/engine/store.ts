import type { Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { Keys } from '../keys.ts';
import { BatonError } from '../errors.ts';
import { parseRunRecord, parseWaits, type RunRecord, type SessionMessage } from '../transitions/record.ts';
import { listRuns, type ListOptions, type RunsListing } from './run-listing.ts';
import { readStepOrder, readStepsPage, type StepMark, type StepView } from './step-list.ts';
import type { DeleteOutcome } from '../transitions/delete.ts';
import type { Resolution } from '../transitions/resolve.ts';
import type { ApiGateway } from '../transitions/api-gateway.ts';

export interface StepsPage { steps: StepView[]; nextCursor: string | null }

/** Hooks for metrics: transitions the API process itself makes (a submit's are the door's: SubmitEvents, submissions.ts). */
export interface RunStoreEvents {
  /** This call cancelled a run no worker held (a held run is finished by its worker). */
  cancelled?(run: RunRecord): void;
}

/**
 * The domain operations the API calls: every write is one Lua transition on the scope's
 * slot, followed by the BullMQ dispatch it asked for (the outbox step).
 */
export class RunStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly transitions: ApiGateway,
    private readonly events: RunStoreEvents = {},
  ) {}

  /** Whether a submit with this idempotency key made a run in the scope within the key's 24 h (submissions.ts). */
  async idempotencyKeyUsed(scope: string, idempotencyKey: string): Promise<boolean> {
    return (await this.redis.exists(this.keys.scope(scope).idempotency(idempotencyKey))) === 1;
  }

  /** A run with its pending waits. */
  async get(scope: string, runId: string): Promise<RunRecord | undefined> {
    const sk = this.keys.scope(scope);
    // One MULTI (both keys share the scope's slot), so the waits are the record's.
    const replies = await this.redis.multi().hgetall(sk.run(runId)).hgetall(sk.waits(runId)).exec();
    for (const [err] of replies ?? []) if (err) throw err;
    return withWaits(replies?.[0]?.[1] as Record<string, string>, replies?.[1]?.[1] as Record<string, string>);
  }

  /**
   * The run at the head of a session: the one running, retrying, waiting or dispatched (the
   * session's `active` field, set by transitions/submit.lua and moved on by the finish that ends it).
   */
  async activeRun(scope: string, sessionId: string): Promise<RunRecord | undefined> {
    const runId = await this.redis.hget(this.keys.scope(scope).session(sessionId), 'active');
    return runId ? this.get(scope, runId) : undefined;
  }

  /** Cancels a run; returns its state afterwards (a finished run is returned unchanged). */
  async cancel(scope: string, runId: string): Promise<RunRecord> {
    // The state the cancel produced, not a later read: a running run answers `running` with
    // cancelRequested, even when its worker stops it before this answer is sent.
    const { outcome, run } = await this.transitions.scope(scope).cancel(runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    if (outcome === 'cancelled') this.events.cancelled?.(run);
    return run;
  }

  /**
   * Deletes an ended run now: what the end of its retention would take, and its entries in the
   * listings; the turn it committed stays in its session's history. One not ended is left as it is.
   */
  deleteRun(scope: string, runId: string): Promise<DeleteOutcome> {
    return this.transitions.scope(scope).deleteRun(runId);
  }

  /** Lets a blocked run continue: with the operator's value for the step, or re-running it. */
  async resolveStep(scope: string, runId: string, stepKey: string, resolution: Resolution): Promise<RunRecord> {
    await this.transitions.scope(scope).resolve(runId, stepKey, resolution);
    const run = await this.get(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    return run;
  }

  /**
   * Runs of a scope (or of one session), newest first, read by index (run-listing.ts). The
   * indexes are ordered by (creation ms, run id), both descending, and the cursor is the last
   * (ms, id) returned: several runs created in the same millisecond are a normal burst, and a
   * cursor holding only the time would skip the rest of them.
   */
  list(scope: string, opts: ListOptions): Promise<RunsListing> {
    return listRuns(this.redis, this.keys, scope, { maxBytes: this.config.PAGE_MAX_BYTES, ...opts });
  }

  /**
   * A page of a run's memoized steps, in the order they started, of at most `limit` steps and
   * PAGE_MAX_BYTES of values (step-list.ts); RUN_NOT_FOUND when the run does not exist.
   */
  async steps(scope: string, runId: string, opts: { limit: number; cursor?: number }): Promise<StepsPage> {
    // The answer's own bytes besides the steps: its envelope.
    const page = await readStepsPage(this.redis, this.keys, scope, runId, { ...opts, maxBytes: this.config.PAGE_MAX_BYTES - 64 });
    if (!page) throw new BatonError('RUN_NOT_FOUND');
    return page;
  }

  /** Every step of a run in the order they started, no values (a re-run's plan); RUN_NOT_FOUND when the run does not exist. */
  async stepOrder(scope: string, runId: string): Promise<StepMark[]> {
    const order = await readStepOrder(this.redis, this.keys, scope, runId, this.config.PAGE_MAX_BYTES);
    if (!order) throw new BatonError('RUN_NOT_FOUND');
    return order;
  }

  /**
   * A session's committed history, oldest first: a page of at most `limit` messages and
   * PAGE_MAX_BYTES bytes (the first one whatever its size), read in bounded chunks in Redis
   * (transitions/history-page.lua). A page that stopped on bytes has a nextCursor like a full one.
   */
  async messages(
    scope: string, sessionId: string, opts: { limit: number; cursor?: number },
  ): Promise<{ messages: SessionMessage[]; nextCursor: string | null }> {
    const start = opts.cursor ?? 0;
    // The answer's own bytes besides the messages: its envelope, and a comma between two.
    const maxBytes = this.config.PAGE_MAX_BYTES - 64 - opts.limit;
    const page = await this.transitions.scope(scope).historyPage(sessionId, start, opts.limit, maxBytes);
    const messages = page.messages.map((m) => JSON.parse(m) as SessionMessage);
    return { messages, nextCursor: page.next === undefined ? null : String(page.next) };
  }
}

function withWaits(record: Record<string, string> | undefined, waits: Record<string, string> | undefined): RunRecord | undefined {
  const run = parseRunRecord(record ?? {});
  if (run && waits && Object.keys(waits).length) run.waits = parseWaits(waits);
  return run;
}
