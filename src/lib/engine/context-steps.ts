import type { InferCall, InferOptions, ModelCallUsage } from '../sdk/agent.ts';
import type { UsageTotals } from '../contract/runs.ts';
import { ID_PATTERN } from '../keys.ts';
import { BudgetExceededError, type BudgetCheck, type BudgetHold } from './flow/budgets.ts';
import type { BucketRequest } from './flow/rate-limiter.ts';
import type { StepTrace } from '../tracing/tracing.ts';
import type { ContextDeps } from './context-deps.ts';
import type { AgentStream, Capture } from './context-events.ts';
import { RunWaiting, stepBody, type AttemptWaits } from './context-waits.ts';

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

/** What ctx.step, ctx.infer and ctx.tool ask for: one value down the whole step path. */
export interface StepRequest<T> {
  /** The agent (or sub-agent) whose context made the call: its text is replayed and its usage counted. */
  agent: string;
  kind: 'step' | 'infer' | 'tool';
  /** The step's name, its context's prefix included; the call's number makes it a key (StepRunner.key). */
  name: string;
  fn: (call: InferCall) => Promise<T> | T;
  /** False: a start marker is stored first, and a start with no result blocks the run (invariant 5). */
  idempotent: boolean;
  /** ctx.infer's options (its budget estimate, its rate-limit bucket). */
  infer?: InferOptions;
  /** A tool's arguments, traced. */
  args?: unknown;
}

/** A step request with its key (`<kind>:<name>:<n>`), as it is run. */
export type StepCall<T> = Omit<StepRequest<T>, 'name'> & { key: string };

/** Model ids longer than this are cut: a model id is short, and it becomes part of a field of the scope's usage hash. */
const MODEL_ID_MAX = 200;

/**
 * The memo behind ctx.step/infer/tool. Lookups are local (the steps hash came with the
 * claim); only a miss costs a round trip (two for a non-idempotent step: its start marker,
 * then its result). An inference takes the scope's token budget and its provider's bucket
 * first, and its usage is stored with its result.
 */
export class StepRunner {
  /** The run's model usage: what earlier attempts stored (the claimed record) and what this one stored. */
  readonly usage: UsageTotals;
  private readonly seq = new Map<string, number>();
  /**
   * How many of the run's steps have started, this attempt's and those stored before it: each
   * step stores its place (`o`), so the inspector lists steps that started in one millisecond
   * in the order they started.
   */
  private started: number;

  constructor(
    private readonly d: ContextDeps,
    /** The run's memo: step key -> stored JSON, and start markers (`<key>#started`). */
    private readonly memo: Map<string, string>,
    private readonly waits: AttemptWaits,
    private readonly stream: AgentStream,
  ) {
    this.started = new Set([...memo.keys()].map((k) => (k.endsWith('#started') ? k.slice(0, -'#started'.length) : k))).size;
    this.usage = { ...(d.run.usage ?? { inputTokens: 0, outputTokens: 0, totalTokens: 0, modelCalls: 0 }) };
  }

  /** The key of the next call of `kind` named `name`: `<kind>:<name>:<n>`, n counting the calls in this attempt. */
  key(kind: string, name: string): string {
    if (!ID_PATTERN.test(name)) {
      throw new TypeError(`step name ${JSON.stringify(name)} must match ${ID_PATTERN}`);
    }
    const n = (this.seq.get(`${kind}:${name}`) ?? 0) + 1;
    this.seq.set(`${kind}:${name}`, n);
    return `${kind}:${name}:${n}`;
  }

  /** A step by its name: keyed now (in call order), then run. */
  memoized<T>(request: StepRequest<T>): Promise<T> {
    const { name, ...rest } = request;
    let key: string;
    try {
      key = this.key(request.kind, name);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.run({ ...rest, key });
  }

  /** A step in its span (a memo hit's too), which says whether it was a hit, blocked or failed. */
  async run<T>(call: StepCall<T>): Promise<T> {
    const span = this.d.trace?.step(call.kind, call.key, { idempotent: call.idempotent, memoHit: this.memo.has(call.key) });
    span?.toolArguments(call.args);
    try {
      return await this.once(call, span);
    } catch (err) {
      if (err instanceof RunBlocked) span?.blocked();
      // A budget wait inside the step parked the run: no failure of the step's.
      else if (!(err instanceof RunWaiting)) span?.failed(err);
      throw err;
    } finally {
      span?.end();
    }
  }

  private async once<T>(call: StepCall<T>, span: StepTrace | undefined): Promise<T> {
    const { agent, kind, key, fn, idempotent, infer } = call;
    const stored = this.memo.get(key);
    if (stored !== undefined) {
      this.d.memo?.hit(kind);
      const { v, e } = JSON.parse(stored) as { v: T; e?: string };
      // The text an inference streamed (what its agent selected) is part of this attempt's answer: replay it.
      if (e) this.stream.emit(agent, e);
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
    this.waits.begin();
    try {
      // The provider's rate-limit bucket, taken right before the call itself (limitedCall below).
      const bucket = kind === 'infer' ? this.bucketFor(key, infer) : undefined;
      if (!idempotent) {
        if (this.memo.has(`${key}#started`)) {
          this.waits.block(key);
          throw new RunBlocked(key);
        }
        await this.d.transitions.step({ op: 'start', stepKey: key });
        this.memo.set(`${key}#started`, String(Date.now()));
      }
      const capture = kind === 'infer' ? this.stream.capture(agent) : undefined;
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
        const made = () => fn({ idempotencyKey: `${this.d.run.id}:${key}`, signal: this.d.attempt.signal, recordUsage });
        const body = () => stepBody.run(key, () => (bucket ? this.limitedCall(bucket, made, calls, capture) : made()));
        value = await (span ? span.within(body) : body());
      } finally {
        open = false;
        if (capture) this.stream.release(capture);
      }
      span?.inferred(calls, provider, capture?.text);
      const finishedAt = Date.now();
      const json = JSON.stringify(
        capture?.text ? { v: value ?? null, e: capture.text, startedAt, finishedAt, o } : { v: value ?? null, startedAt, finishedAt, o },
      );
      // The usage goes with the result in one fenced script, which counts it only if it stores the result.
      const usage = calls.length ? { agent, at: finishedAt, calls } : undefined;
      const kept = await this.d.transitions.step({ op: 'done', stepKey: key, result: json, usage });
      this.memo.set(key, kept);
      if (usage && kept === json) this.counted(agent, calls);
      return (JSON.parse(kept) as { v: T }).v;
    } finally {
      if (hold) await this.releaseHold(hold);
      this.waits.settled();
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
      this.waits.begin();
      try {
        check = await budgets.check(run.scope, estimate, `${run.id}:${stepKey}`);
      } finally {
        this.waits.settled();
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
      await this.waits.wait<null>({
        key: this.key('wait', 'token-budget'), kind: 'budget', name: 'token-budget', untilMs: Date.parse(check.budget.resetsAt),
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
    bucket: BucketRequest, call: () => Promise<T> | T, calls: CountedCall[], capture: Capture | undefined,
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
