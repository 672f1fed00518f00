import { AsyncLocalStorage } from 'node:async_hooks';
import type {
  Agent, EmitOptions, HistoryMessage, InferCall, InferOptions, ModelCallUsage, RunContext, SteeringMessage, WaitOptions,
} from '../sdk/agent.ts';
import { attachEventSink, type McpCallNotice } from '../sdk/agent-reports.ts';
import { DEFAULT_SELECT, type AgentEvent, type EventPredicate } from '../sdk/select.ts';
import type { ApprovalDecision, UsageTotals } from '../contract/runs.ts';
import { BatonError } from '../errors.ts';
import { PermanentError, ToolDeclinedError, WaitTimeoutError } from '../sdk/errors.ts';
import type { EventWriter } from '../streams/writer.ts';
import type { Logger } from '../logger.ts';
import type { Attempt } from './attempt.ts';
import type { RunRecord } from './record.ts';
import type { Transitions, WaitRequest } from './transitions.ts';
import type { AttemptOutcome } from './outcome.ts';
import type { SchemaGuard } from './schema-guard.ts';
import { WaitTokens } from './wait-tokens.ts';
import type { AgentInput } from '../artifacts/artifact-store.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';
import { ID_PATTERN } from '../keys.ts';
import { RUN_LIMIT_CODES } from '../contract/runs.ts';
import { BudgetExceededError, type BudgetCheck, type BudgetHold, type TokenBudgets } from './budgets.ts';
import type { BucketRequest, RateLimiter } from './rate-limiter.ts';
import type { AttemptTrace, StepTrace } from '../ops/tracing.ts';

/**
 * Thrown inside the agent at a step its run must block on. The attempt closes blocked
 * because the context says so (ContextState.stopped), not because of this error, which the
 * agent may catch or wrap.
 */
export class RunBlocked extends Error {
  constructor(readonly stepKey: string) {
    super(`run blocked on step ${stepKey}`);
    this.name = 'RunBlocked';
  }
}

/**
 * Rejects what an agent still awaits (its waits) once its attempt ended waiting: the agent
 * unwinds, and the run goes on in a later attempt that finds the answers in the memo.
 */
export class RunWaiting extends Error {
  constructor(readonly waitKeys: string[]) {
    super(`the attempt ended waiting for ${waitKeys.join(', ')}`);
    this.name = 'RunWaiting';
  }
}

/** What ContextState.ended resolves with: the run parks or blocks (ContextState.stopped says which). */
export const STOPPED: unique symbol = Symbol('stopped');

/** ctx.emitData's names: a chat page's part type is `data-<name>`. */
const DATA_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
/** ctx.emitData's most, as JSON: data is streamed, and every reader's API parses and frames it whole. */
const MAX_DATA_BYTES = 64 * 1024;

/** The value an approval takes; the API checks a resume against it like any wait's schema. */
export const APPROVAL_SCHEMA: Record<string, unknown> = {
  type: 'object',
  required: ['approved'],
  additionalProperties: false,
  properties: { approved: { type: 'boolean' }, reason: { type: 'string', maxLength: 2000 } },
};

/** A wait's prompt (an approval's: the tool's arguments) is stored with the run and shown to people: bounded. */
export const MAX_PROMPT_BYTES = 64 * 1024;
/** Timeouts and sleeps up to a year: deadlines beyond that are more likely a unit mistake than a plan. */
const MAX_WAIT_MS = 366 * 24 * 3600_000;

/** The step whose body runs in this async context: a wait cannot be awaited inside one. */
const stepBody = new AsyncLocalStorage<string>();

export interface MemoEvents {
  hit(kind: string): void;
  miss(kind: string): void;
}

export interface ContextDeps {
  transitions: Transitions;
  attempt: Attempt;
  run: RunRecord;
  agent: Agent;
  history: HistoryMessage[];
  /** ctx.memoryBlocks: its `conversation` is `history`. */
  memoryBlocks: MemoryBlocks;
  /** ctx.input: the run's input with its artifacts resolved. */
  input: AgentInput;
  /** The steps hash as read at claim: step key -> stored JSON ({v, e?, startedAt?, finishedAt?}) or start markers. */
  steps: Record<string, string>;
  writer: EventWriter;
  log: Logger;
  memo?: MemoEvents;
  /** Steering messages delivered at a boundary reached for the first time (metrics: a replayed boundary is not counted again). */
  steered?(count: number): void;
  /** Model calls of a step whose result this attempt stored: counted now, once (metrics). */
  usageCounted?(agent: string, calls: readonly ModelCallUsage[]): void;
  /** A request to an MCP server an agent helper made (metrics). */
  mcpCalled?(notice: McpCallNotice): void;
  /** Derives the resume tokens of waits; without it waits get none (resumable with a key only). */
  waitTokens?: WaitTokens;
  /** Checks the JSON Schema of a wait before the run waits on it. */
  schemaGuard?: SchemaGuard;
  /** Waits the run may have pending at once (MAX_WAITS_PER_RUN); the one past it fails the run with TOO_MANY_WAITS. */
  maxWaits?: number;
  /** Model providers' rate-limit buckets (RATE_LIMITS), taken before each model call that names one; unset: none defined. */
  rateLimits?: RateLimiter;
  /** The scopes' daily token budgets, checked before each model call made; unset: none checked. */
  budgets?: TokenBudgets;
  /** A model call the scope's budget refused: the run fails, or waits for the next day (metrics). */
  budgetRefused?(action: 'failed' | 'waiting'): void;
  /** The attempt's spans: each step gets one (docs/tracing.md); unset: none. */
  trace?: AttemptTrace;
}

/** Model ids longer than this are cut: a model id is short, and it becomes part of a field of the scope's usage hash. */
const MODEL_ID_MAX = 200;

/**
 * The agent's view of a run, and the memo behind ctx.step/infer/tool. Memo lookups are
 * local (the steps hash came with the claim); only a miss costs a round trip (two for a
 * non-idempotent step: its start marker, then its result).
 *
 * Every event an agent produces passes the agent's `select` here, tagged with the context
 * it came through (the run's agent, or a sub-agent): what is left out is neither written to
 * the run's log nor part of the text committed when the run ends early.
 *
 * Waits: a wait whose answer is in the memo returns it at once; any other is recorded here
 * and its promise stays pending. Once the agent waits on waits only, `ended` resolves and
 * the attempt's outcome is parked, with every wait recorded. A non-idempotent step started
 * by an earlier attempt with no result resolves `ended` too: the outcome is blocked. "Only" is judged after
 * a turn of the event loop with no step in flight, so the waits of a Promise.all, and waits
 * reached right after a step that was still running, all make it into the one park.
 */
export class ContextState {
  /** Selected non-ephemeral text emitted in this attempt (committed as an incomplete answer if the run ends early). */
  emitted = '';
  toolCallsSeen = 0;
  /** Steering messages taken in this attempt (earlier boundaries replayed included), each with the length of `emitted` then. */
  readonly steered: { id: string; content: string; after: number }[] = [];
  /** Boundaries this attempt reached (ctx.steering.take): the next one's number is this plus 1. */
  private boundaries = 0;
  /** The run's model usage: what earlier attempts stored (the claimed record) and what this one stored. */
  readonly usage: UsageTotals;
  private readonly memo: Map<string, string>;
  private readonly seq = new Map<string, number>();
  /**
   * How many of the run's steps have started, this attempt's and those stored before it: each
   * step stores its place (`o`), so the inspector lists steps that started in one millisecond
   * in the order they started.
   */
  private started: number;
  /** Text of running inferences, per agent: what a memo hit replays. */
  private readonly captures = new Set<{ agent: string; text: string }>();
  private readonly select: EventPredicate;
  private readonly subagents = new Map<string, RunContext>();
  readonly ctx: RunContext;
  /** Waits reached and not answered, in the order reached. */
  private readonly pending = new Map<string, { request: WaitRequest; reject(err: unknown): void }>();
  /** Steps (and wait schema checks) in flight: the agent is not blocked on waits only while any runs. */
  private busy = 0;
  private gateQueued = false;
  private isParked = false;
  /** The step the run must block on, once one is reached. */
  private blockedOn: string | undefined;
  private resolveEnded!: (v: typeof STOPPED) => void;
  /** Resolves when the agent waits on waits and nothing else, or reached a step to block on (never otherwise). */
  readonly ended = new Promise<typeof STOPPED>((resolve) => { this.resolveEnded = resolve; });

  constructor(private readonly d: ContextDeps) {
    d.attempt.signal.addEventListener('abort', () => this.abandonWaits(), { once: true });
    this.memo = new Map(Object.entries(d.steps));
    this.started = new Set(Object.keys(d.steps).map((k) => (k.endsWith('#started') ? k.slice(0, -'#started'.length) : k))).size;
    this.select = d.agent.select ?? DEFAULT_SELECT;
    this.usage = { ...(d.run.usage ?? { inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: 0 }) };
    this.ctx = this.context(d.run.agent, '');
  }

  /** A context of `agent`, whose steps are named `<prefix><name>`. */
  private context(agent: string, prefix: string): RunContext {
    const { d } = this;
    const run = d.run;
    const ctx: RunContext = {
      runId: run.id,
      scope: run.scope,
      sessionId: run.sessionId,
      runtime: run.runtime,
      agent,
      attempt: run.attempt,
      maxAttempts: run.maxAttempts,
      input: d.input,
      metadata: run.metadata ?? {},
      memory: run.memory,
      history: d.history,
      memoryBlocks: d.memoryBlocks,
      signal: d.attempt.signal,
      log: prefix ? d.log.child({ subagent: agent }) : d.log,
      emit: (text, options) => this.emit(agent, text, options),
      emitData: (name, data, options) => this.emitData(agent, name, data, options),
      step: (key, fn, options) => this.memoized(agent, 'step', prefix + key, fn, options?.idempotent ?? true),
      infer: (name, fn, options) => this.memoized(agent, 'infer', prefix + name, fn, true, options),
      tool: (name, args, fn, options) => {
        if (!options?.approval) {
          this.toolCallsSeen++;
          return this.memoized(agent, 'tool', prefix + name, (call) => fn(args, call), options?.idempotent ?? true, undefined, args);
        }
        // Both keys now, in call order: a concurrent call must not take this call's numbers.
        let waitKey: string;
        let toolKey: string;
        try {
          waitKey = this.stepKey('wait', prefix + name);
          toolKey = this.stepKey('tool', prefix + name);
        } catch (err) {
          return Promise.reject(err);
        }
        // Counted once approved (or run in an earlier attempt): a declined call never ran.
        const run = () => {
          this.toolCallsSeen++;
          return this.runStep(agent, 'tool', toolKey, (call) => fn(args, call), options.idempotent ?? true, undefined, args);
        };
        return this.approvedTool(prefix + name, waitKey, toolKey, run, args);
      },
      waitFor: <T>(name: string, options: WaitOptions = {}) => {
        try {
          const key = this.stepKey('wait', prefix + name);
          return this.wait<T>({ key, kind: 'input', name: prefix + name, ...checkWaitOptions(key, options) });
        } catch (err) {
          return Promise.reject(err);
        }
      },
      sleep: (ms) => {
        try {
          const key = this.stepKey('wait', `${prefix}sleep`);
          if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_WAIT_MS) {
            throw new TypeError(`ctx.sleep(${String(ms)}): ms must be a number from 0 to ${MAX_WAIT_MS}`);
          }
          if (ms === 0) return Promise.resolve();
          return this.wait<null>({ key, kind: 'sleep', name: `${prefix}sleep`, timeoutMs: Math.ceil(ms) }).then(() => undefined);
        } catch (err) {
          return Promise.reject(err);
        }
      },
      sleepUntil: (when) => {
        try {
          const key = this.stepKey('wait', `${prefix}sleep`);
          const untilMs = when instanceof Date ? when.getTime() : when;
          if (typeof untilMs !== 'number' || !Number.isFinite(untilMs)) throw new TypeError('ctx.sleepUntil needs a Date or epoch ms');
          if (untilMs <= Date.now() && !this.memo.has(key)) return Promise.resolve();
          return this.wait<null>({ key, kind: 'sleep', name: `${prefix}sleep`, untilMs: Math.ceil(untilMs) }).then(() => undefined);
        } catch (err) {
          return Promise.reject(err);
        }
      },
      steering: { take: () => this.takeSteering() },
      subagent: (name) => {
        if (typeof name !== 'string' || !ID_PATTERN.test(name)) throw new TypeError(`sub-agent name ${JSON.stringify(name)} must match ${ID_PATTERN}`);
        // The prefix names the whole chain, so a sub-agent's steps read as whose they are. One
        // context per chain: helpers keep per-context state (baton/ai's pending tool failure),
        // which must not depend on whether the agent asked for the sub-agent once or twice.
        const sub = `${prefix}${name}.`;
        let known = this.subagents.get(sub);
        if (!known) this.subagents.set(sub, (known = this.context(name, sub)));
        return known;
      },
    };
    attachEventSink(ctx, { publish: (e) => this.publish(e), mcpCall: (n) => this.d.mcpCalled?.(n) });
    return ctx;
  }

  /**
   * A boundary of the run (ctx.steering.take): the messages pending now, or those an earlier
   * attempt took at this boundary (lua/steer.lua). The events written before it go first, so a
   * reader sees each `steering` outcome after the text and tool results that came before it.
   */
  private async takeSteering(): Promise<SteeringMessage[]> {
    const { d } = this;
    if (d.attempt.signal.aborted) throw d.attempt.signal.reason;
    const boundary = ++this.boundaries;
    this.busy++;
    try {
      await d.writer.flush();
      const { taken, fresh } = await d.transitions.steer(d.attempt, d.run.sessionId, boundary);
      for (const m of taken) this.steered.push({ ...m, after: this.emitted.length });
      if (fresh && taken.length > 0) d.steered?.(taken.length);
      return taken;
    } finally {
      this.settled();
    }
  }

  /** Once `ended` resolved: the attempt's outcome, blocked (which wins) or parked. */
  stopped(): Extract<AttemptOutcome, { kind: 'blocked' | 'parked' }> | undefined {
    if (this.blockedOn !== undefined) return { kind: 'blocked', stepKey: this.blockedOn };
    if (this.isParked) return { kind: 'parked', waits: [...this.pending.values()].map((p) => p.request) };
    return undefined;
  }

  /** An approval-gated tool: the approval first (unless the call ran in an earlier attempt), then the memoized tool. */
  private async approvedTool<T>(name: string, waitKey: string, toolKey: string, run: () => Promise<T>, args: unknown): Promise<T> {
    if (!this.memo.has(toolKey)) {
      const decision = await this.wait<ApprovalDecision>({
        key: waitKey, kind: 'approval', name, prompt: checkedPrompt(waitKey, args), schema: APPROVAL_SCHEMA,
      });
      if (!decision?.approved) throw new ToolDeclinedError(name, decision?.reason);
    }
    return run();
  }

  /** A wait: its answer from the memo, or recorded and pending until the attempt parks. */
  private async wait<T>(request: WaitRequest): Promise<T> {
    const stored = this.memo.get(request.key);
    if (stored !== undefined) {
      const s = JSON.parse(stored) as { v: T; timedOut?: boolean };
      // A budget wait ends at its deadline (the day's end) by design: that is no timeout.
      if (s.timedOut && request.kind !== 'budget') throw new WaitTimeoutError(request.name, request.key);
      return s.v;
    }
    if (this.d.attempt.signal.aborted) throw this.d.attempt.signal.reason;
    const inStep = stepBody.getStore();
    if (inStep !== undefined) {
      throw new TypeError(
        `${request.key} is awaited inside the body of ${inStep}: a step's result is stored when its body returns, ` +
        'and a wait ends the attempt before that; wait before or after the step',
      );
    }
    const max = this.d.maxWaits ?? Infinity;
    if (this.pending.size >= max) {
      throw new PermanentError(
        `${request.key} is one wait too many: a run may have at most ${max} waits pending at once (MAX_WAITS_PER_RUN)`,
        RUN_LIMIT_CODES.TOO_MANY_WAITS,
      );
    }
    if (request.schema !== undefined && request.schema !== APPROVAL_SCHEMA) await this.checkSchema(request);
    if (request.kind !== 'sleep' && request.kind !== 'budget' && this.d.waitTokens) {
      request.tokenHash = WaitTokens.digest(this.d.waitTokens.tokenFor(this.d.run.scope, this.d.run.id, request.key));
    }
    return new Promise<T>((_, reject) => {
      this.pending.set(request.key, { request, reject });
      this.gate();
    });
  }

  /**
   * A schema no value could be checked against would leave the wait unresumable: refuse it
   * before waiting, with the limits of an outputSchema (a self-reference included), naming
   * the limit or the reason.
   */
  private async checkSchema(request: WaitRequest): Promise<void> {
    if (!this.d.schemaGuard) return;
    this.busy++;
    try {
      await this.d.schemaGuard.check(request.schema!, { scope: this.d.run.scope });
    } catch (err) {
      if (err instanceof BatonError) {
        // The guard speaks of a submit's outputSchema; here it is this wait's schema.
        const why = err.details.map((d) => {
          const at = d.path.replace(/^body\.outputSchema\.?/, '');
          return at ? `${d.message} (at ${at})` : d.message;
        }).join('; ') || err.message;
        throw new PermanentError(`the schema of ${request.key} is not a usable JSON Schema: ${why}`, 'WAIT_SCHEMA_INVALID');
      }
      throw err;
    } finally {
      this.settled();
    }
  }

  /** After a turn of the event loop: park if waits pend and nothing else runs. */
  private gate(): void {
    if (this.gateQueued || this.isParked) return;
    this.gateQueued = true;
    setImmediate(() => {
      this.gateQueued = false;
      if (this.isParked || this.blockedOn !== undefined || this.busy > 0) return;
      if (this.pending.size === 0 || this.d.attempt.signal.aborted) return;
      this.isParked = true;
      this.resolveEnded(STOPPED);
    });
  }

  private settled(): void {
    this.busy--;
    if (this.pending.size > 0) this.gate();
  }

  /** The attempt ended (parked, cancelled, lost...): what the agent still awaits is rejected, so it unwinds. */
  private abandonWaits(): void {
    const reason = this.d.attempt.signal.reason as { reason?: string } | undefined;
    const err = reason?.reason === 'waiting' ? new RunWaiting([...this.pending.keys()]) : reason;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  private emit(agent: string, text: string, options?: EmitOptions): void {
    if (typeof text !== 'string' || text === '' || this.d.attempt.signal.aborted) return;
    const data = { text, agent, role: 'assistant' as const };
    if (options?.ephemeral) {
      this.publish({ type: 'ephemeral', data });
      return;
    }
    if (!this.selected({ type: 'token', data })) return;
    this.emitted += text;
    for (const c of this.captures) if (c.agent === agent) c.text += text;
    this.d.writer.token(text, { agent, role: 'assistant' });
  }

  private emitData(agent: string, name: string, data: unknown, options?: { id?: string; transient?: boolean }): void {
    if (typeof name !== 'string' || !DATA_NAME.test(name)) throw new TypeError(`ctx.emitData: name ${JSON.stringify(name)} must match ${DATA_NAME}`);
    if (options?.id !== undefined && (typeof options.id !== 'string' || options.id.length > 128)) {
      throw new TypeError('ctx.emitData: id must be a string of at most 128 characters');
    }
    const json = JSON.stringify(data ?? null);
    if (Buffer.byteLength(json) > MAX_DATA_BYTES) throw new TypeError(`ctx.emitData(${name}): the data is more than ${MAX_DATA_BYTES} bytes of JSON`);
    this.publish({
      type: 'data',
      data: {
        name, data: JSON.parse(json) as unknown, agent, role: 'assistant',
        ...(options?.id !== undefined ? { dataId: options.id } : {}), ...(options?.transient ? { transient: true as const } : {}),
      },
    });
  }

  /** Writes a non-text event to the log if the agent selects it. */
  private publish(e: AgentEvent): void {
    if (this.d.attempt.signal.aborted || !this.selected(e)) return;
    this.d.writer.event(e.type, e.data);
  }

  private selected(e: AgentEvent): boolean {
    if (this.select(e)) return true;
    const { onSkip } = this.d.agent;
    if (onSkip) {
      // An observer: its failure is the observer's, never the run's.
      try {
        onSkip(e);
      } catch (err) {
        this.d.log.warn({ err: (err as Error)?.message }, 'onSkip threw');
      }
    }
    return false;
  }

  private stepKey(kind: string, name: string): string {
    if (!ID_PATTERN.test(name)) {
      throw new TypeError(`step name ${JSON.stringify(name)} must match ${ID_PATTERN}`);
    }
    const n = (this.seq.get(`${kind}:${name}`) ?? 0) + 1;
    this.seq.set(`${kind}:${name}`, n);
    return `${kind}:${name}:${n}`;
  }

  private memoized<T>(
    agent: string, kind: 'step' | 'infer' | 'tool', name: string, fn: (call: InferCall) => Promise<T> | T, idempotent: boolean,
    infer?: InferOptions, args?: unknown,
  ): Promise<T> {
    let key: string;
    try {
      key = this.stepKey(kind, name);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.runStep(agent, kind, key, fn, idempotent, infer, args);
  }

  /** A step in its span (a memo hit's too), which says whether it was a hit, blocked or failed. `args`: a tool's. */
  private async runStep<T>(
    agent: string, kind: 'step' | 'infer' | 'tool', key: string, fn: (call: InferCall) => Promise<T> | T, idempotent: boolean,
    infer?: InferOptions, args?: unknown,
  ): Promise<T> {
    const span = this.d.trace?.step(kind, key, { idempotent, memoHit: this.memo.has(key) });
    span?.toolArguments(args);
    try {
      return await this.stepOnce(agent, kind, key, fn, idempotent, infer, span);
    } catch (err) {
      if (err instanceof RunBlocked) span?.blocked();
      // A budget wait inside the step parked the run: no failure of the step's.
      else if (!(err instanceof RunWaiting)) span?.failed(err);
      throw err;
    } finally {
      span?.end();
    }
  }

  private async stepOnce<T>(
    agent: string, kind: 'step' | 'infer' | 'tool', key: string, fn: (call: InferCall) => Promise<T> | T, idempotent: boolean,
    infer: InferOptions | undefined, span: StepTrace | undefined,
  ): Promise<T> {
    const stored = this.memo.get(key);
    if (stored !== undefined) {
      this.d.memo?.hit(kind);
      const { v, e } = JSON.parse(stored) as { v: T; e?: string };
      // The text an inference streamed (what its agent selected) is part of this attempt's answer: replay it.
      if (e) this.emit(agent, e);
      return v;
    }
    // An attempt whose signal aborted (lease lost, cancel, shutdown) starts no new work: its
    // writes would be refused anyway, and a body run now could repeat a side effect that the
    // attempt holding the run next performs again.
    if (this.d.attempt.signal.aborted) throw this.d.attempt.signal.reason;
    this.d.memo?.miss(kind);
    // A model call about to be made: the scope's daily token budget first (a memo hit above made
    // none), which holds the call's tokens until the step's write below has counted them.
    const hold = kind === 'infer' ? await this.withinBudget(key, estimateOf(key, infer)) : undefined;
    this.busy++;
    try {
      // The provider's rate-limit bucket, taken right before the call itself (limitedCall below).
      const bucket = kind === 'infer' ? this.bucketFor(key, infer) : undefined;
      if (!idempotent) {
        if (this.memo.has(`${key}#started`)) {
          this.blockedOn ??= key;
          this.resolveEnded(STOPPED);
          throw new RunBlocked(key);
        }
        await this.d.transitions.step(this.d.attempt, { op: 'start', stepKey: key });
        this.memo.set(`${key}#started`, String(Date.now()));
      }
      const capture = kind === 'infer' ? { agent, text: '' } : undefined;
      if (capture) this.captures.add(capture);
      const calls: CountedCall[] = [];
      let provider: string | undefined;
      let open = true;
      const recordUsage = (u: ModelCallUsage) => {
        // Usage reported after the step was written can be counted nowhere. A warning, not an
        // error: a late callback (a stream's onFinish) throwing would crash the worker, not the run.
        if (!open) return void this.d.log.warn({ stepKey: key }, 'usage recorded after its step finished is not counted');
        calls.push(modelCall(u));
        if (typeof u?.provider === 'string' && u.provider) provider = u.provider.slice(0, MODEL_ID_MAX);
      };
      let value: T;
      // The step's times and place ride along with its result (the inspector shows them): no extra round trip.
      const o = this.started++;
      const startedAt = Date.now();
      try {
        const call = () => fn({ idempotencyKey: `${this.d.run.id}:${key}`, signal: this.d.attempt.signal, recordUsage });
        const body = () => stepBody.run(key, () => (bucket ? this.limitedCall(bucket, call, calls, capture) : call()));
        value = await (span ? span.within(body) : body());
      } finally {
        open = false;
        if (capture) this.captures.delete(capture);
      }
      span?.inferred(calls, provider, capture?.text);
      const finishedAt = Date.now();
      const json = JSON.stringify(
        capture?.text ? { v: value ?? null, e: capture.text, startedAt, finishedAt, o } : { v: value ?? null, startedAt, finishedAt, o },
      );
      // The usage goes with the result in one fenced script, which counts it only if it stores the result.
      const usage = calls.length ? { agent, at: finishedAt, calls } : undefined;
      const kept = await this.d.transitions.step(this.d.attempt, { op: 'done', stepKey: key, result: json, usage });
      this.memo.set(key, kept);
      if (usage && kept === json) this.counted(agent, calls);
      return (JSON.parse(kept) as { v: T }).v;
    } finally {
      if (hold) await this.releaseHold(hold);
      this.settled();
    }
  }

  /**
   * Lets a budget hold go. One that cannot be (Redis out of reach) lapses by itself
   * (BUDGET_HOLD_MS), only making the budget stricter until then: no failure of the step's.
   */
  private async releaseHold(hold: BudgetHold): Promise<void> {
    try {
      await this.d.budgets?.release(hold);
    } catch (err) {
      this.d.log.warn({ err: (err as Error)?.message, tokens: hold.tokens }, 'a token-budget hold could not be let go; it lapses by itself');
    }
  }

  /**
   * The scope's daily token budget, before the model call `stepKey` (the rule is budgetRefuses
   * in budgets.ts). Refused, the run fails with BUDGET_EXCEEDED; with `onBudget: "wait"` it
   * waits (a wait of kind budget, until the next UTC midnight: parked like a sleep, holding
   * no worker) and checks again when it goes on. A budget wait an earlier attempt reached is
   * answered in the memo, so the loop checks again at once. A call no whole day's budget
   * could take, or one made inside a step's body (which cannot park), fails even then.
   */
  private async withinBudget(stepKey: string, estimate: number | undefined): Promise<BudgetHold | undefined> {
    const { budgets, run } = this.d;
    if (!budgets) return undefined;
    for (;;) {
      let check: BudgetCheck;
      // Counted as a step in flight: the run must not park on other waits while the check is out.
      this.busy++;
      try {
        check = await budgets.check(run.scope, estimate, `${run.id}:${stepKey}`);
      } finally {
        this.settled();
      }
      if (check.allowed) {
        // The attempt may have ended while the check was out: no call is started for it then.
        if (this.d.attempt.signal.aborted) {
          if (check.hold) await this.releaseHold(check.hold);
          throw this.d.attempt.signal.reason;
        }
        return check.hold;
      }
      const inStep = stepBody.getStore();
      const why = run.onBudget !== 'wait'
        ? 'the run fails (its onBudget is "fail")'
        : check.never
          ? 'its estimate alone is more than a whole day\'s budget'
          : inStep !== undefined
            ? `it is made inside the body of ${inStep}, which cannot wait for the next day`
            : undefined;
      if (why !== undefined) {
        this.d.budgetRefused?.('failed');
        throw new BudgetExceededError(stepKey, check, why);
      }
      this.d.budgetRefused?.('waiting');
      this.d.log.info({ stepKey, ...check.budget, estimate }, 'model call refused by the scope\'s token budget: waiting for the next UTC day');
      await this.wait<null>({
        key: this.stepKey('wait', 'token-budget'), kind: 'budget', name: 'token-budget', untilMs: Date.parse(check.budget.resetsAt),
      });
    }
  }

  /** The bucket an inference's `rateLimit` names, checked (rate-limiter.ts); undefined: none to take. */
  private bucketFor(stepKey: string, o: InferOptions | undefined): BucketRequest | undefined {
    const r = o?.rateLimit;
    if (r === undefined) return undefined;
    const limiter = this.d.rateLimits;
    if (!limiter) {
      if (r?.optional === true) return undefined;
      throw new TypeError(`${stepKey}: rateLimit names a bucket, and this worker has no rate limiter`);
    }
    // The reservation defaults to the estimate the call gave for the token budget.
    if (typeof r !== 'object' || r === null) return limiter.request(r, stepKey);
    return limiter.request({ ...r, tokens: r.tokens ?? o?.estimatedTokens }, stepKey);
  }

  /**
   * One model call under its provider's bucket: a grant first (the step waits for it, its
   * lease kept and its signal honoured), then the call, then the grant settled with the usage
   * the call recorded. After a 429 the limiter makes the call again: what it recorded goes.
   */
  private limitedCall<T>(
    bucket: BucketRequest, call: () => Promise<T> | T, calls: CountedCall[], capture: { text: string } | undefined,
  ): Promise<T> {
    // The run's scope takes its place in the bucket's fair order.
    return this.d.rateLimits!.call({ ...bucket, scope: this.d.run.scope }, this.d.attempt.signal, {
      run: async () => call(),
      reported: () => {
        const tokens = calls.reduce((n, c) => n + c.inputTokens + c.outputTokens, 0);
        return tokens > 0 ? tokens : undefined;
      },
      streamed: () => Boolean(capture?.text),
      reset: () => void calls.splice(0),
    }, this.d.log);
  }

  private counted(agent: string, calls: readonly ModelCallUsage[]): void {
    for (const c of calls) {
      this.usage.inputTokens += c.inputTokens ?? 0;
      this.usage.outputTokens += c.outputTokens ?? 0;
      this.usage.modelCalls++;
    }
    this.usage.totalTokens = this.usage.inputTokens + this.usage.outputTokens;
    this.d.usageCounted?.(agent, calls);
  }
}

/** A model call as the scripts count it (the provider is only traced). */
type CountedCall = Required<Omit<ModelCallUsage, 'provider'>>;

/** A model call as the scripts count it: a bounded model id, whole non-negative token counts. */
function modelCall(u: ModelCallUsage): CountedCall {
  // Capped well below what Lua prints as an integer (14 digits): no provider call comes near it.
  const tokens = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n > 0 ? Math.min(Math.round(n), 1e12) : 0);
  const model = typeof u?.model === 'string' && u.model.trim() ? u.model.trim().slice(0, MODEL_ID_MAX) : 'unknown';
  return { model, inputTokens: tokens(u?.inputTokens), outputTokens: tokens(u?.outputTokens) };
}

/** InferOptions.estimatedTokens, checked: a whole number of tokens, or undefined (not known). */
function estimateOf(stepKey: string, o: InferOptions | undefined): number | undefined {
  if (o === undefined || o === null) return undefined;
  if (typeof o !== 'object') throw new TypeError(`${stepKey}: the options must be an object`);
  const e = o.estimatedTokens;
  if (e === undefined) return undefined;
  if (typeof e !== 'number' || !Number.isFinite(e) || e < 0) throw new TypeError(`${stepKey}: estimatedTokens must be a number of tokens, 0 or more`);
  return Math.ceil(e);
}

/** The parts of WaitOptions a wait records, checked. */
function checkWaitOptions(key: string, o: WaitOptions): Pick<WaitRequest, 'prompt' | 'schema' | 'timeoutMs'> {
  if (typeof o !== 'object' || o === null) throw new TypeError(`${key}: the options must be an object`);
  const out: Pick<WaitRequest, 'prompt' | 'schema' | 'timeoutMs'> = {};
  if (o.timeoutMs !== undefined) {
    if (!Number.isInteger(o.timeoutMs) || o.timeoutMs < 1 || o.timeoutMs > MAX_WAIT_MS) {
      throw new TypeError(`${key}: timeoutMs must be a whole number of ms from 1 to ${MAX_WAIT_MS}`);
    }
    out.timeoutMs = o.timeoutMs;
  }
  if (o.schema !== undefined) {
    if (typeof o.schema !== 'object' || o.schema === null || Array.isArray(o.schema)) throw new TypeError(`${key}: schema must be a JSON Schema object`);
    out.schema = o.schema;
  }
  if (o.prompt !== undefined) out.prompt = checkedPrompt(key, o.prompt);
  return out;
}

function checkedPrompt(key: string, prompt: unknown): unknown {
  if (prompt === undefined) return undefined;
  let text: string | undefined;
  try {
    text = JSON.stringify(prompt);
  } catch (err) {
    // eslint-disable-next-line preserve-caught-error -- no cause: classify follows a cause's network code, and this is the agent's error
    throw new TypeError(`${key}: the prompt is not JSON (${(err as Error).message})`);
  }
  if (text === undefined) return undefined;
  if (Buffer.byteLength(text) > MAX_PROMPT_BYTES) throw new TypeError(`${key}: the prompt is over ${MAX_PROMPT_BYTES} bytes as JSON`);
  return prompt;
}
