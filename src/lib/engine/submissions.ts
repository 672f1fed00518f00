import { createHash } from 'node:crypto';
import type { ArtifactStore } from '../artifacts/artifact-store.ts';
import { assertAttachmentsExist } from '../artifacts/resolve.ts';
import type { Config } from '../config/index.ts';
import type { SteeringOutcome, SubmitRequest as PublicSubmit } from '../contract/runs.ts';
import { BatonError } from '../errors.ts';
import { newMessageId, newRunId } from '../ids.ts';
import type { Keys } from '../keys.ts';
import { SubmitTrace, type HeaderCarrier } from '../tracing/tracing.ts';
import type { Redis } from '../redis/redis.ts';
import { quoteList, type WorkerRegistry } from './flow/worker-registry.ts';
import { assertValidOutputSchema } from './schema/output-schema.ts';
import type { NewRunRecord, RunRecord } from '../transitions/record.ts';
import type { SchemaGuard } from './schema/schema-guard.ts';
import type { RunStore } from './store.ts';
import type { NewRun, StoredSteering, SubmitLimit, SubmitReply } from '../transitions/submit.ts';
import type { ApiGateway } from '../transitions/api-gateway.ts';

/** A stream token minted for a new run's reader (tenancy/stream-tokens.ts makes them). */
export interface MintedStreamToken { token: string; expiresAt: number }

/** What the door needs of the stream token store: a token for one run, unlimited, kept under the key that asked. */
export interface StreamTokenMinter {
  mint(scope: string, grant: { runId: string }, keyId: string, o: { limited: boolean }): Promise<MintedStreamToken>;
}

/** A submit as the door takes it: the API's request (defaults applied) and the scope of its path. */
export type SubmitRequest = Omit<PublicSubmit, 'runtime' | 'agent' | 'streamToken'> & { scope: string; runtime: string; agent: string };

export interface SubmitResult {
  run: RunRecord; created: boolean;
  /** Multitask `steer`: what became of the message; `run` is the run it went to or became. */
  steering?: SteeringOutcome;
}

/** What a re-run starts with and what it will repeat (planned by reruns.ts): the door's `rerun` option. */
export interface RerunPlan {
  /** The run it repeats. */
  of: string;
  fromStep?: string;
  /** The fields of that run's steps hash copied into the new run's: results, and their start markers. */
  copySteps: string[];
  /** Its non-idempotent steps (they carry a start marker) that the re-run runs again, in order. */
  nonIdempotent: string[];
}

/** Hooks for metrics and timers: what a submit made (hooks.ts fans them out). */
export interface SubmitEvents {
  /** A new run was accepted (not an idempotent replay). */
  submitted?(run: RunRecord): void;
  /**
   * A steering message went to a session's active run (`pending`) or, with none, started a turn
   * (`turn`); its later outcomes are counted where they happen (metrics).
   */
  steered?(runtime: string, outcome: 'pending' | 'turn'): void;
  /**
   * This submit set a deadline of the scope's timers (`due:<runId>`, `ttl:<runId>`), due at
   * `at`: the process may act on it at its moment (the sweeper's soon()).
   */
  deadline?(scope: string, member: string, at: number): void;
}

export interface SubmissionDeps {
  redis: Redis;
  keys: Keys;
  config: Config;
  /** The submit transition (transitions/submit.lua). */
  transitions: ApiGateway;
  /** Runs read back: the run a steering message went to. */
  store: RunStore;
  artifacts: ArtifactStore;
  registry: WorkerRegistry;
  /** Compiles outputSchemas off the event loop; unset: the process's shared guard. */
  schemaGuard?: SchemaGuard;
  /** The scope's submit rate limit (undefined: off), taken by the submit script. */
  limit: SubmitLimit | undefined;
  /** Mints the stream tokens a submit asks for (`streamTokenFor`): the API's; a door without it mints none. */
  streamTokens?: StreamTokenMinter;
  events?: SubmitEvents;
}

/**
 * How one caller's submit differs from another's, each by name. What a submit is checked
 * against (output schema, artifacts, the registry's agents, the scheduled-run cap, the rate
 * limit, the scope's caps in the script) is the same for every caller; the request itself
 * says the rest (`awaitAgent`: queue for an agent no worker offered yet).
 */
export interface SubmitOptions<A> {
  /** The request's: a submit whose client left has its output schema not checked at all. */
  signal?: AbortSignal;
  /**
   * Called after every check that can refuse the submit and before the run is made, its
   * value returned as `admitted`: the API admits the submit's event stream here, so a stream
   * over its caps makes no run.
   */
  admit?(): A;
  /** Mint a stream token for the run, on behalf of this key (not counted against the mint rate). */
  streamTokenFor?: string;
  /** The request's headers: a caller's `traceparent` there is linked from the submit's span, or its parent (BATON_TRACE_CALLER). */
  traceHeaders?: HeaderCarrier;
  /** A re-run: the run it repeats and the steps it starts with (reruns.ts); its record names the run (`rerunOf`). */
  rerun?: RerunPlan;
}

export interface Submission<A> extends SubmitResult {
  /** What the caller should know: no live worker serves the run's agent yet (registry). */
  warnings: string[];
  streamToken?: MintedStreamToken;
  admitted?: A;
}

/** Idempotency keys are remembered 24 h: a client retrying a submit within a day gets the same run. */
const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

/**
 * The one door every run comes in by: the API's submit and re-run, the chat, OpenAI and MCP
 * routes, schedules' ticks (schedules/scheduler.ts), bulk re-runs (bulk-operations.ts) and the
 * tests all call submit(). In one call: the output schema checked (once, off the event loop),
 * the attached artifacts found, the agent looked up in the registry (refused when the runtime
 * never offered it: assertAwaited), the scheduled-run cap read, then the run made by the
 * submit transition inside the `baton.submit` span (with the scope's rate limit, its first
 * status event carrying the registry's warnings) and, when asked, a stream token minted for it.
 */
export class Submissions {
  /** Scopes this process has put in the sweeper's work list (`scopes`): it only ever grows. */
  private readonly knownScopes = new Set<string>();

  constructor(private readonly d: SubmissionDeps) {}

  async submit<A = never>(req: SubmitRequest, o: SubmitOptions<A> = {}): Promise<Submission<A>> {
    const { d } = this;
    if (req.outputSchema !== undefined) await assertValidOutputSchema(req.outputSchema, d.schemaGuard, req.scope, o.signal);
    await assertAttachmentsExist(d.artifacts, req.scope, req.input.artifacts, d.config.ARTIFACT_INLINE_MAX_BYTES);
    const { warnings, unknown } = await d.registry.admission(req.runtime, req.agent, d.config.AGENT_GRACE_MS);
    if (unknown) await this.assertAwaited(req, unknown);
    const due = req.runAt !== undefined ? Date.parse(req.runAt) : req.delayMs !== undefined ? Date.now() + req.delayMs : undefined;
    if (due !== undefined && due > Date.now()) await this.assertScheduledRoom(req);
    const admitted = o.admit?.();
    // The rate limit is taken in the submit itself, after every check that can refuse it:
    // bad input, a refused submit or a replay spends no token (transitions/submit.lua). The run
    // keeps the submit's trace context, which its attempts continue.
    const span = new SubmitTrace(req, o.traceHeaders, { content: d.config.BATON_TRACE_CONTENT, caller: d.config.BATON_TRACE_CALLER });
    let made: SubmitResult;
    try {
      await this.noteScope(req.scope);
      const input = newRun(req, d, { traceparent: span.traceparent, warnings, rerun: o.rerun });
      made = await this.resultOf(req, input, await d.transitions.submit(input));
      span.made(made.run, made.created);
    } catch (err) {
      span.failed(err);
      throw err;
    } finally {
      span.end();
    }
    const { run, created, steering } = made;
    // A page that shows the answer gets its token with the run: no second request before it can stream.
    const streamToken = o.streamTokenFor === undefined ? undefined : await this.mint(req.scope, run.id, o.streamTokenFor);
    return {
      run, created, warnings, ...(steering ? { steering } : {}), ...(streamToken ? { streamToken } : {}), ...(admitted ? { admitted } : {}),
    };
  }

  private mint(scope: string, runId: string, keyId: string): Promise<MintedStreamToken> {
    if (!this.d.streamTokens) throw new Error('this submit door mints no stream tokens (SubmissionDeps.streamTokens)');
    return this.d.streamTokens.mint(scope, { runId }, keyId, { limited: false });
  }

  /**
   * The scope list is the sweeper's work list; adding a scope that ends up with no run is
   * harmless. Once per scope and process: the set only ever grows.
   */
  private async noteScope(scope: string): Promise<void> {
    if (this.knownScopes.has(scope)) return;
    await this.d.redis.sadd(this.d.keys.scopes, scope);
    this.knownScopes.add(scope);
  }

  /** What the submit transition answered, as the submit's result; the hooks for a run it made. */
  private async resultOf(req: SubmitRequest, input: NewRun, reply: SubmitReply): Promise<SubmitResult> {
    const { d } = this;
    const { run, created, runId: id, steered } = reply;
    if (steered) return this.steered(req.scope, steered.message, steered.sent);
    // An idempotent repeat whose run has passed its retention returns no record.
    if (!run) throw new BatonError('RUN_NOT_FOUND', `the run ${id} of this idempotency key has expired`);
    const { steering } = input;
    if (created) {
      d.events?.submitted?.(run);
      if (steering) d.events?.steered?.(run.runtime, 'turn');
      if (run.runAt !== undefined && run.status === 'scheduled') d.events?.deadline?.(req.scope, `due:${run.id}`, run.runAt);
      if (run.startBy !== undefined) d.events?.deadline?.(req.scope, `ttl:${run.id}`, run.startBy);
    }
    return { run, created, ...(steering ? { steering: { messageId: steering.id, runId: run.id, outcome: 'turn' as const } } : {}) };
  }

  /**
   * A steering message the session's active run got (or got before: a resend), answered with
   * that run as it is now. `sent`: this submit sent it (202); a resend answers 200.
   */
  private async steered(scope: string, m: StoredSteering, sent: boolean): Promise<SubmitResult> {
    const run = await this.d.store.get(scope, m.runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND', `the run ${m.runId} this message went to has expired`);
    if (sent) this.d.events?.steered?.(run.runtime, 'pending');
    const outcome: SteeringOutcome = {
      messageId: m.id, runId: m.runId, outcome: m.state,
      ...(m.step !== undefined ? { step: m.step } : {}),
      ...(m.reason !== undefined ? { reason: m.reason } : {}),
      ...(m.turnRunId !== undefined ? { turnRunId: m.turnRunId } : {}),
    };
    return { run, created: sent, steering: outcome };
  }

  /**
   * A submit for an agent its runtime's workers never offered in the last day is a typo more
   * often than an agent on its way: refused at once with 422 UNKNOWN_AGENT (nothing written,
   * no rate-limit token spent), so a chat page shows the mistake instead of waiting
   * AGENT_GRACE_MS for the run to fail. It queues when the caller says it will deploy the
   * agent (`awaitAgent: true`), when the operator set UNKNOWN_AGENT_SUBMIT=queue, and for a
   * retry of a submit whose idempotency key made a run already (it answers that run, as before).
   */
  private async assertAwaited(req: SubmitRequest, known: string[]): Promise<void> {
    const { d } = this;
    if (req.awaitAgent === true || d.config.UNKNOWN_AGENT_SUBMIT === 'queue') return;
    if (req.idempotencyKey !== undefined && await d.store.idempotencyKeyUsed(req.scope, req.idempotencyKey)) return;
    throw new BatonError(
      'UNKNOWN_AGENT',
      `No worker of runtime "${req.runtime}" offered agent "${req.agent}" in the last day; its agents: ${quoteList(known)}. ` +
        'Send "awaitAgent": true to queue the run until a worker with it starts.',
      [{ path: 'body.agent', message: `runtime "${req.runtime}" has no agent "${req.agent}"; it has ${quoteList(known)}` }],
    );
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
    const { d } = this;
    const max = d.config.SCHEDULED_MAX_PER_SCOPE;
    const pending = await d.redis.zcard(d.keys.scope(req.scope).runsByStatus('scheduled'));
    if (pending < max) return;
    if (req.idempotencyKey !== undefined && await d.store.idempotencyKeyUsed(req.scope, req.idempotencyKey)) return;
    throw new BatonError('TOO_MANY_SCHEDULED_RUNS', undefined, [{
      path: req.runAt !== undefined ? 'body.runAt' : 'body.delayMs',
      message: `the scope has ${pending} runs scheduled and not yet due (SCHEDULED_MAX_PER_SCOPE ${max}); one comes due or is cancelled first`,
    }]);
  }
}

/** The submit transition's input (transitions/submit.ts: NewRun) for a request. */
function newRun(
  req: SubmitRequest, d: Pick<SubmissionDeps, 'config' | 'limit'>,
  o: { traceparent: string | undefined; warnings: string[]; rerun: RerunPlan | undefined },
): NewRun {
  const steering = req.multitask === 'steer'
    ? { id: req.messageId ?? newMessageId(), content: req.input.content, ttlMs: IDEMPOTENCY_TTL_MS }
    : undefined;
  return {
    record: newRunRecord(req, d.config.MAX_ATTEMPTS, o.traceparent, o.rerun),
    multitask: req.multitask ?? 'enqueue',
    // The request's digest is kept with the key only: a submit without one is never compared.
    idempotency: req.idempotencyKey === undefined
      ? undefined
      : { key: req.idempotencyKey, ttlMs: IDEMPOTENCY_TTL_MS, requestHash: requestHash(req, o.rerun) },
    runAt: req.runAt === undefined ? undefined : Date.parse(req.runAt), delayMs: req.delayMs,
    limit: d.limit,
    turnBytes: userMessageBytes(req.input.content),
    ...(o.warnings.length ? { warnings: o.warnings } : {}),
    ...(o.rerun ? { rerun: { copySteps: o.rerun.copySteps } } : {}),
    ...(steering ? { steering } : {}),
  };
}

/**
 * The record a submit writes (record.ts: NewRunRecord), from its request: the run's one
 * encoding, which crosses to Lua once (ApiGateway.submit, the unit submit.ts).
 */
function newRunRecord(
  req: SubmitRequest, defaultMaxAttempts: number, traceparent: string | undefined, rerun: RerunPlan | undefined,
): NewRunRecord {
  const json = (v: unknown) => (v === undefined ? undefined : JSON.stringify(v));
  return {
    id: newRunId(), scope: req.scope, sessionId: req.sessionId, runtime: req.runtime,
    agent: req.agent, maxAttempts: req.maxAttempts ?? defaultMaxAttempts,
    input: JSON.stringify(req.input),
    // The ids alone, for the transitions that keep the run's artifacts alive (pinArtifacts in transitions/lib/storage.lua).
    artifactIds: req.input.artifacts?.length ? JSON.stringify(req.input.artifacts.map((a) => a.id)) : undefined,
    metadata: json(req.metadata),
    memory: json(req.memory),
    outputSchema: json(req.outputSchema),
    idempotencyKey: req.idempotencyKey,
    // Without it, the first claim replaces the deployment default with the agent's own (transitions/claim.lua).
    maxAttemptsSet: req.maxAttempts !== undefined ? 1 : undefined,
    ttlMs: req.ttlMs,
    timeoutMs: req.timeoutMs,
    priority: req.priority,
    concurrencyKey: req.concurrencyKey,
    onBudget: req.onBudget,
    // The parent of every attempt's span (tracing/tracing.ts); absent when the submit was not traced.
    traceparent,
    rerunOf: rerun?.of,
    rerunFrom: rerun?.fromStep,
    rerunNonIdempotent: rerun?.nonIdempotent.length ? JSON.stringify(rerun.nonIdempotent) : undefined,
  };
}

/**
 * What the turn's user message will take in the session's history, as the finish writes it
 * (executor.ts: `{role, content, runId, createdAt}` as JSON); held against HISTORY_MAX_BYTES.
 */
function userMessageBytes(content: string): number {
  return Buffer.byteLength(JSON.stringify(content)) + 80;
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
