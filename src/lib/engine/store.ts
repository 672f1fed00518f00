import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { Keys } from '../keys.ts';
import { BatonError } from '../errors.ts';
import { newMessageId, newRunId } from '../ids.ts';
import { assertValidOutputSchema } from './schema/output-schema.ts';
import type { SchemaGuard } from './schema/schema-guard.ts';
import { parseRunRecord, parseWaits, type RunRecord, type SessionMessage } from './record.ts';
import { listRuns, type ListOptions, type RunsListing } from './run-listing.ts';
import { readStepOrder, readStepsPage, type StepMark, type StepView } from './step-list.ts';
import { forkSession } from './session-fork.ts';
import type { ForkRequest, SessionFork, SteeringOutcome } from '../contract/runs.ts';
import type { DeleteOutcome, Multitask, Resolution, StoredSteering, SubmitLimit, Transitions } from './transitions.ts';
import type { SubmitRequest as PublicSubmit } from '../contract/runs.ts';

export type { Multitask };

/** A submit as the store takes it: the API's request (defaults applied) and the scope of its path. */
export type SubmitRequest = Omit<PublicSubmit, 'runtime' | 'agent' | 'streamToken'> & { scope: string; runtime: string; agent: string };

export interface SubmitResult {
  run: RunRecord; created: boolean;
  /** Multitask `steer`: what became of the message; `run` is the run it went to or became. */
  steering?: SteeringOutcome;
}

/**
 * `limit`: the scope's submit rate limit; `traceparent`: the submit span's context, stored with
 * the run; `rerun`: the run is a re-run of another, starting with these of its steps (reruns.ts);
 * `warnings`: what the submit's caller was told (submissions.ts), carried by the run's first
 * status event so a reader of its stream is told too.
 */
export interface CreateOptions { limit?: SubmitLimit; traceparent?: string; rerun?: RerunPlan; warnings?: string[] }

/** What a re-run starts with and what it will repeat (planned by reruns.ts): the `rerun` of create's options. */
export interface RerunPlan {
  /** The run it repeats. */
  of: string;
  fromStep?: string;
  /** The fields of that run's steps hash copied into the new run's: results, and their start markers. */
  copySteps: string[];
  /** Its non-idempotent steps (they carry a start marker) that the re-run runs again, in order. */
  nonIdempotent: string[];
}

export interface StepsPage { steps: StepView[]; nextCursor: string | null }

/** Hooks for metrics: transitions the API process itself makes. */
export interface RunStoreEvents {
  /** A new run was accepted (not an idempotent replay). */
  submitted?(run: RunRecord): void;
  /**
   * A steering message went to a session's active run (`pending`) or, with none, started a turn
   * (`turn`); its later outcomes are counted where they happen (metrics).
   */
  steered?(runtime: string, outcome: 'pending' | 'turn'): void;
  /** This call cancelled a run no worker held (a held run is finished by its worker). */
  cancelled?(run: RunRecord): void;
  /**
   * This call set a deadline of the scope's timers (`due:<runId>`, `ttl:<runId>`), due at
   * `at`: the process may act on it at its moment (the sweeper's soon()).
   */
  deadline?(scope: string, member: string, at: number): void;
}

/** Idempotency keys are remembered 24 h: a client retrying a submit within a day gets the same run. */
const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

/**
 * The domain operations the API calls: every write is one Lua transition on the scope's
 * slot, followed by the BullMQ dispatch it asked for (the outbox step).
 */
export class RunStore {
  private readonly knownScopes = new Set<string>();

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Config,
    private readonly transitions: Transitions,
    private readonly events: RunStoreEvents = {},
    /** Compiles outputSchemas off the event loop; unset: the process's shared guard. */
    private readonly schemaGuard?: SchemaGuard,
  ) {}

  /**
   * Checks the output schema, then makes the run (create). `o.limit`: the scope's submit rate
   * limit, taken by the run it makes. The API submits through Submissions, which checks the
   * schema with its other checks and calls create.
   */
  async submit(req: SubmitRequest, o: CreateOptions = {}): Promise<SubmitResult> {
    if (req.outputSchema !== undefined) await assertValidOutputSchema(req.outputSchema, this.schemaGuard, req.scope);
    return this.create(req, o);
  }

  /** Makes the run of a submit whose output schema was checked (submit, Submissions). */
  async create(req: SubmitRequest, o: CreateOptions = {}): Promise<SubmitResult> {
    const due = req.runAt !== undefined ? Date.parse(req.runAt) : req.delayMs !== undefined ? Date.now() + req.delayMs : undefined;
    if (due !== undefined && due > Date.now()) await this.assertScheduledRoom(req);
    const runId = newRunId();
    const fields: Record<string, string | number> = {
      id: runId, scope: req.scope, sessionId: req.sessionId, runtime: req.runtime,
      agent: req.agent, maxAttempts: req.maxAttempts ?? this.config.MAX_ATTEMPTS,
      input: JSON.stringify(req.input),
    };
    // The ids alone, for the transitions that keep the run's artifacts alive (pinArtifacts in lib.lua).
    if (req.input.artifacts?.length) fields.artifactIds = JSON.stringify(req.input.artifacts.map((a) => a.id));
    if (req.metadata !== undefined) fields.metadata = JSON.stringify(req.metadata);
    if (req.memory !== undefined) fields.memory = JSON.stringify(req.memory);
    if (req.outputSchema !== undefined) fields.outputSchema = JSON.stringify(req.outputSchema);
    if (req.idempotencyKey !== undefined) fields.idempotencyKey = req.idempotencyKey;
    // Without it, the first claim replaces the deployment default with the agent's own (lua/claim.lua).
    if (req.maxAttempts !== undefined) fields.maxAttemptsSet = 1;
    if (req.ttlMs !== undefined) fields.ttlMs = req.ttlMs;
    if (req.timeoutMs !== undefined) fields.timeoutMs = req.timeoutMs;
    if (req.priority !== undefined) fields.priority = req.priority;
    if (req.concurrencyKey !== undefined) fields.concurrencyKey = req.concurrencyKey;
    // Read by the worker's budget check (context.ts); absent is `fail`.
    if (req.onBudget !== undefined) fields.onBudget = req.onBudget;
    // The parent of every attempt's span (tracing/tracing.ts); absent when the submit was not traced.
    if (o.traceparent !== undefined) fields.traceparent = o.traceparent;
    if (o.rerun) {
      fields.rerunOf = o.rerun.of;
      if (o.rerun.fromStep !== undefined) fields.rerunFrom = o.rerun.fromStep;
      if (o.rerun.nonIdempotent.length) fields.rerunNonIdempotent = JSON.stringify(o.rerun.nonIdempotent);
    }
    // The scope list is the sweeper's work list; adding a scope that ends up with no run is
    // harmless. Once per scope and process: the set only ever grows.
    if (!this.knownScopes.has(req.scope)) {
      await this.redis.sadd(this.keys.scopes, req.scope);
      this.knownScopes.add(req.scope);
    }
    const steering = req.multitask === 'steer'
      ? { id: req.messageId ?? newMessageId(), content: req.input.content, ttlMs: IDEMPOTENCY_TTL_MS }
      : undefined;
    const { run, created, runId: id, steered } = await this.transitions.submit({
      scope: req.scope, runId, sessionId: req.sessionId, runtime: req.runtime, multitask: req.multitask ?? 'enqueue',
      // The request's digest is kept with the key only: a submit without one is never compared.
      idempotency: req.idempotencyKey === undefined
        ? undefined
        : { key: req.idempotencyKey, ttlMs: IDEMPOTENCY_TTL_MS, requestHash: requestHash(req, o.rerun) },
      fields,
      runAt: req.runAt === undefined ? undefined : Date.parse(req.runAt), delayMs: req.delayMs, ttlMs: req.ttlMs,
      limit: o.limit,
      turnBytes: userMessageBytes(req.input.content),
      ...(o.warnings?.length ? { warnings: o.warnings } : {}),
      ...(o.rerun ? { rerun: { of: o.rerun.of, copySteps: o.rerun.copySteps } } : {}),
      ...(steering ? { steering } : {}),
    });
    if (steered) return this.steered(req.scope, steered.message, steered.sent);
    // An idempotent repeat whose run has passed its retention returns no record.
    if (!run) throw new BatonError('RUN_NOT_FOUND', `the run ${id} of this idempotency key has expired`);
    if (created) {
      this.events.submitted?.(run);
      if (steering) this.events.steered?.(run.runtime, 'turn');
      if (run.runAt !== undefined && run.status === 'scheduled') this.events.deadline?.(req.scope, `due:${run.id}`, run.runAt);
      if (run.startBy !== undefined) this.events.deadline?.(req.scope, `ttl:${run.id}`, run.startBy);
    }
    return { run, created, ...(steering ? { steering: { messageId: steering.id, runId: run.id, outcome: 'turn' as const } } : {}) };
  }

  /**
   * A steering message the session's active run got (or got before: a resend), answered with
   * that run as it is now. `sent`: this submit sent it (202); a resend answers 200.
   */
  private async steered(scope: string, m: StoredSteering, sent: boolean): Promise<SubmitResult> {
    const run = await this.get(scope, m.runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND', `the run ${m.runId} this message went to has expired`);
    if (sent) this.events.steered?.(run.runtime, 'pending');
    const outcome: SteeringOutcome = {
      messageId: m.id, runId: m.runId, outcome: m.state,
      ...(m.step !== undefined ? { step: m.step } : {}),
      ...(m.reason !== undefined ? { reason: m.reason } : {}),
      ...(m.turnRunId !== undefined ? { turnRunId: m.turnRunId } : {}),
    };
    return { run, created: sent, steering: outcome };
  }

  /** Whether a submit with this idempotency key made a run in the scope within the key's 24 h. */
  async idempotencyKeyUsed(scope: string, idempotencyKey: string): Promise<boolean> {
    return (await this.redis.exists(this.keys.scope(scope).idempotency(idempotencyKey))) === 1;
  }

  /**
   * A run due later may be submitted while the scope has fewer than SCHEDULED_MAX_PER_SCOPE
   * scheduled runs not yet due (its `status:scheduled` index; a run leaves it when due or
   * cancelled), else 429 TOO_MANY_SCHEDULED_RUNS, with no Retry-After: when one comes due is
   * the tenant's own schedule. An idempotent repeat makes no run and is let through to get
   * its first one. Read before the submit transition, so submits racing at the cap may pass
   * it by the few in flight (each spends a submit rate-limit token; the burst bounds them).
   */
  private async assertScheduledRoom(req: SubmitRequest): Promise<void> {
    const sk = this.keys.scope(req.scope);
    const max = this.config.SCHEDULED_MAX_PER_SCOPE;
    const pending = await this.redis.zcard(sk.runsByStatus('scheduled'));
    if (pending < max) return;
    if (req.idempotencyKey !== undefined && await this.idempotencyKeyUsed(req.scope, req.idempotencyKey)) return;
    throw new BatonError('TOO_MANY_SCHEDULED_RUNS', undefined, [{
      path: req.runAt !== undefined ? 'body.runAt' : 'body.delayMs',
      message: `the scope has ${pending} runs scheduled and not yet due (SCHEDULED_MAX_PER_SCOPE ${max}); one comes due or is cancelled first`,
    }]);
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
   * session's `active` field, set by lua/submit.lua and moved on by the finish that ends it).
   */
  async activeRun(scope: string, sessionId: string): Promise<RunRecord | undefined> {
    const runId = await this.redis.hget(this.keys.scope(scope).session(sessionId), 'active');
    return runId ? this.get(scope, runId) : undefined;
  }

  /** Cancels a run; returns its state afterwards (a finished run is returned unchanged). */
  async cancel(scope: string, runId: string): Promise<RunRecord> {
    // The state the cancel produced, not a later read: a running run answers `running` with
    // cancelRequested, even when its worker stops it before this answer is sent.
    const { outcome, run } = await this.transitions.cancel(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    if (outcome === 'cancelled') this.events.cancelled?.(run);
    return run;
  }

  /**
   * Deletes an ended run now: what the end of its retention would take, and its entries in the
   * listings; the turn it committed stays in its session's history. One not ended is left as it is.
   */
  deleteRun(scope: string, runId: string): Promise<DeleteOutcome> {
    return this.transitions.deleteRun(scope, runId);
  }

  /** Lets a blocked run continue: with the operator's value for the step, or re-running it. */
  async resolveStep(scope: string, runId: string, stepKey: string, resolution: Resolution): Promise<RunRecord> {
    await this.transitions.resolve(scope, runId, stepKey, resolution);
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

  /** Forks a session's committed history into a new session (session-fork.ts). */
  fork(scope: string, sessionId: string, body: ForkRequest): Promise<SessionFork> {
    const sk = this.keys.scope(scope);
    const runOf = async (runId: string) => {
      const [sid, status] = await this.redis.hmget(sk.run(runId), 'sessionId', 'status');
      return status === null ? undefined : { sessionId: sid, status };
    };
    return forkSession(this.transitions, runOf, scope, sessionId, body);
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
   * (lua/history-page.lua). A page that stopped on bytes has a nextCursor like a full one.
   */
  async messages(
    scope: string, sessionId: string, opts: { limit: number; cursor?: number },
  ): Promise<{ messages: SessionMessage[]; nextCursor: string | null }> {
    const start = opts.cursor ?? 0;
    // The answer's own bytes besides the messages: its envelope, and a comma between two.
    const maxBytes = this.config.PAGE_MAX_BYTES - 64 - opts.limit;
    const page = await this.transitions.historyPage(scope, sessionId, start, opts.limit, maxBytes);
    const messages = page.messages.map((m) => JSON.parse(m) as SessionMessage);
    return { messages, nextCursor: page.next === undefined ? null : String(page.next) };
  }
}

/**
 * What the turn's user message will take in the session's history, as the finish writes it
 * (executor.ts: `{role, content, runId, createdAt}` as JSON); held against HISTORY_MAX_BYTES.
 */
function userMessageBytes(content: string): number {
  return Buffer.byteLength(JSON.stringify(content)) + 80;
}

function withWaits(record: Record<string, string> | undefined, waits: Record<string, string> | undefined): RunRecord | undefined {
  const run = parseRunRecord(record ?? {});
  if (run && waits && Object.keys(waits).length) run.waits = parseWaits(waits);
  return run;
}

/**
 * What makes two submits the same request: every field (defaults applied, so `agent: "echo"`
 * and no agent are alike) but the idempotency key itself and awaitAgent, as JSON with its
 * object keys sorted (a client may serialize the same object in another order), hashed.
 */
function requestHash(req: SubmitRequest, rerun?: RerunPlan): string {
  // awaitAgent says how to admit the submit, not what to run: a retry that adds it after a
  // 422 UNKNOWN_AGENT (which made nothing) or drops it is the same request.
  const { idempotencyKey: _key, awaitAgent: _await, ...request } = req;
  // A re-run's key stands for the re-run it made: of that run, from that step.
  const hashed = rerun ? { ...request, rerun: { of: rerun.of, fromStep: rerun.fromStep } } : request;
  return createHash('sha256').update(canonicalJson(hashed)).digest('base64url');
}

/** JSON with object keys in sorted order, undefined members left out as JSON.stringify does. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  const entries = Object.keys(value).sort().flatMap((k) => {
    const v = (value as Record<string, unknown>)[k];
    return v === undefined ? [] : [`${JSON.stringify(k)}:${canonicalJson(v)}`];
  });
  return `{${entries.join(',')}}`;
}
