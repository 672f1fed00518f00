import type { Redis } from 'ioredis';
import type { Agent, AgentResult, HistoryMessage } from '../sdk/agent.ts';
import { OutputInvalidError } from '../sdk/errors.ts';
import type { Config } from '../config/index.ts';
import type { JobData } from './dispatcher.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import { Appender } from '../streams/appender.ts';
import { EventWriter } from '../streams/writer.ts';
import type { LeaseKeeper } from './lease-keeper.ts';
import { Attempt } from '../transitions/attempt.ts';
import { ContextState, type MemoEvents } from './context.ts';
import { STOPPED } from './context-waits.ts';
import { closeAttempt, type ExecutorEvents, type Progress } from './close.ts';
import { abortOutcome, errorText, thrownOutcome, type Answer, type AttemptOutcome } from './outcome.ts';
import { parseRunRecord, type RunResult } from '../transitions/record.ts';
import type { ClaimReply } from '../transitions/claim.ts';
import type { WorkerGateway } from '../transitions/attempt-gateway.ts';
import type { FlowGateway } from '../transitions/flow-gateway.ts';
import type { WaitTokens } from './waits/wait-tokens.ts';
import { RunMemory } from '../sessions/run-memory.ts';
import { claimHistoryReads } from '../sessions/memory-session.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';
import type { AgentInput, ArtifactStore } from '../artifacts/artifact-store.ts';
import { resolveInputArtifacts } from '../artifacts/resolve.ts';
import { validateOutput } from './schema/output-schema.ts';
import type { SchemaGuard } from './schema/schema-guard.ts';
import type { RateLimiter } from './flow/rate-limiter.ts';
import { TokenBudgets } from './flow/budgets.ts';
import { AttemptTrace } from '../tracing/tracing.ts';

export type Outcome = { kind: 'done' } | { kind: 'later'; at: number };

export type { ExecutorEvents };

export interface ExecutorDeps {
  redis: Redis;
  keys: Keys;
  config: Config;
  transitions: WorkerGateway;
  /** Flow control's gateway: the scopes' daily token budgets' holds. */
  flow: FlowGateway;
  leases: LeaseKeeper;
  agents: ReadonlyMap<string, Agent>;
  workerId: string;
  /** The worker's logger, naming it and its runtime: a run's lines add the run's own keys. */
  log: Logger;
  events?: ExecutorEvents;
  /** Validates goal finishes off the event loop; unset: the process's shared guard. */
  schemaGuard?: SchemaGuard;
  /** Where input artifacts are read from. */
  artifacts: ArtifactStore;
  /** Model providers' rate-limit buckets, taken before the model calls that name one; unset: none defined. */
  rateLimits?: RateLimiter;
  /** Derives the resume tokens of the waits runs reach; unset: waits get no token. */
  waitTokens?: WaitTokens;
  /**
   * Brings a deadline forward from the next sweep to its moment (the sweeper's soon()): a
   * parked run's earliest wait deadline. The sweeper enforces it anyway; this only makes a
   * short sleep take about its length.
   */
  wakeAt?(scope: string, runId: string, at: number): void;
}

type Claimed = Extract<ClaimReply, { kind: 'claimed' }>;

/**
 * Executes one delivery of a run: claim (fenced lease), run the agent with a RunContext,
 * then exactly one closing transition: finish, retry, block, or hand-over at shutdown.
 * Every write carries the fence from the claim; once another worker takes over, nothing
 * this attempt does can land.
 */
export class RunExecutor {
  /** `{agent: maxAttempts}` of the agents that declare a default; the claim applies it to a run's first attempt. */
  private readonly attemptDefaults: Record<string, number> = {};
  /** `{agent: n}`: the newest n messages of the session the claim reads for that agent's memory (-1 all, 0 none). */
  private readonly historyReads: Record<string, number> = {};
  /** The scopes' daily token budgets, checked by each run's context before a model call. */
  private readonly budgets: TokenBudgets;
  /** Gathers the event batches of this process's runs into one append call per scope. */
  readonly appender: Appender;

  constructor(private readonly d: ExecutorDeps) {
    this.budgets = new TokenBudgets(d.redis, d.keys, d.config, { transitions: d.flow });
    this.appender = new Appender(d.transitions, { maxMs: d.config.EMIT_FLUSH_MAX_MS, fullAt: d.config.EMIT_FLUSH_FULL_AT });
    for (const [name, agent] of d.agents) {
      if (agent.maxAttempts !== undefined) this.attemptDefaults[name] = agent.maxAttempts;
      this.historyReads[name] = claimHistoryReads(agent.memory, d.config.HISTORY_READ_MAX);
    }
  }

  async execute(job: JobData): Promise<Outcome> {
    const claim = await this.d.transitions.claim(job, this.d.workerId, this.attemptDefaults, this.historyReads);
    switch (claim.kind) {
      case 'claimed':
        return this.runClaimed(claim);
      case 'ended': {
        // Ended by this claim (a cancel requested while no live worker held it, a ttlMs or
        // timeoutMs that ran out, one takeover too many): reported here, where it happened.
        if (claim.status === 'failed') {
          this.d.log.warn({ scope: job.scope, runId: job.runId }, 'run failed at its claim (timeoutMs or recovery limit)');
        }
        if (this.d.events?.finished) {
          const ended = parseRunRecord(await this.d.redis.hgetall(this.d.keys.scope(job.scope).run(job.runId)));
          if (ended) this.d.events.finished(ended, claim.status);
        }
        return { kind: 'done' };
      }
      // Held by a live lease (a duplicate delivery) or a retry not yet due: look again then.
      case 'later':
        return { kind: 'later', at: claim.until };
      // Unknown, finished, queued (parked by a drain, say) or blocked: this delivery has nothing to do.
      case 'nothing':
        return { kind: 'done' };
    }
  }

  private async runClaimed(claim: Claimed): Promise<Outcome> {
    const { config: c, transitions } = this.d;
    const { run, fence, recovered, deadline, now } = claim;
    const attempt = new Attempt(run, fence, this.d.keys.scope(run.scope));
    // A child of the run's stored trace context: every attempt, on any worker, joins the submit's trace.
    const trace = new AttemptTrace(run, { recovered, fence, workerId: this.d.workerId }, c.BATON_TRACE_CONTENT);
    // Not workerId or runtime: the worker's logger has them, and a child would repeat them.
    const log = this.d.log.child({ scope: run.scope, runId: run.id, sessionId: run.sessionId, ...trace.logFields() });
    log.info({ attempt: run.attempt, fence, recovered }, recovered ? 'run recovered' : 'run started');
    this.d.events?.started?.(run, recovered);

    this.d.leases.hold(attempt);
    const writer = new EventWriter({
      transitions, attempt, appender: this.appender, flushMs: c.EMIT_FLUSH_MS, flushTokens: c.EMIT_FLUSH_TOKENS,
      onLeaseLost: () => attempt.abort('lease-lost'),
      onWritten: (events, tokens) => this.d.events?.appended?.(run, events, tokens),
    });
    // timeoutMs: the claim said when the budget ends (Redis time, so the delay is measured on
    // one clock); the run's code is stopped then and the run fails with TIMEOUT.
    const budget = deadline === undefined ? undefined : setTimeout(() => attempt.abort('timeout'), Math.max(0, deadline - now));
    // What is left of MAX_RUN_MS after the attempts before this one: then the signal aborts.
    const budgetMs = c.MAX_RUN_MS - (run.runMs ?? 0);
    const ceiling = setTimeout(() => attempt.abort('run-limit'), Math.max(0, budgetMs));
    try {
      const ended: AgentEnded = budgetMs <= 0
        ? { outcome: { kind: 'aborted', reason: 'run-limit' } }
        : await this.runAgent(claim, attempt, writer, log, trace).catch((err: unknown): AgentEnded => ({
          // A bug of Baton's in the agent's part: closed as broken, never left leased to be
          // recovered into the same throw.
          outcome: { kind: 'broken', error: errorText(err) },
        }));
      // The one closing: it never throws, and whatever it wrote (or could not) ends the attempt.
      await closeAttempt({
        deps: this.d, gateway: transitions.of(attempt), run, attempt, writer, log, trace, memory: ended.memory, progress: ended.progress,
      }, ended.outcome);
      return { kind: 'done' };
    } finally {
      clearTimeout(budget);
      clearTimeout(ceiling);
      this.d.leases.release(attempt);
      writer.close();
      trace.end();
    }
  }

  /**
   * The agent's part of an attempt: open its memory and input, run it with a RunContext, and
   * check its answer. Ends in an outcome, whatever the agent does (a lost lease included);
   * throws only what is a bug of Baton's.
   */
  private async runAgent(claim: Claimed, attempt: Attempt, writer: EventWriter, log: Logger, trace: AttemptTrace): Promise<AgentEnded> {
    const { redis, keys, config: c, transitions } = this.d;
    const { run, steps, history: claimedHistory, historyCut } = claim;
    const { signal } = attempt;
    const thrown = (err: unknown) => thrownOutcome(err, signal, run, c, log);
    const agent = this.d.agents.get(run.agent);
    if (!agent) {
      return { outcome: { kind: 'failed', error: { code: 'UNKNOWN_AGENT', message: `no agent "${run.agent}" in this worker` } } };
    }
    // A store that cannot be opened or read, recall's embeddings and the input artifacts fail
    // the attempt like the agent would (classified, maybe retried).
    let memory: RunMemory | undefined;
    let history: HistoryMessage[];
    let memoryBlocks: MemoryBlocks;
    let input: AgentInput;
    try {
      if (historyCut) {
        log.info({ messages: claimedHistory.length, maxBytes: c.HISTORY_READ_MAX_BYTES }, 'history cut to the newest messages that fit HISTORY_READ_MAX_BYTES');
      }
      memory = await RunMemory.open(agent, run, redis, keys, claimedHistory, { log, signal, historyCut });
      ({ history, memoryBlocks } = await memory.context());
      input = await resolveInputArtifacts(this.d.artifacts, run.scope, run.input);
    } catch (err) {
      return { outcome: thrown(err), memory };
    }
    const state = new ContextState({
      transitions: transitions.of(attempt), attempt, run, agent, history, memoryBlocks, input, steps, writer, log,
      memo: this.d.events as MemoEvents | undefined,
      usageCounted: (agentName, calls) => this.d.events?.modelUsage?.(run, agentName, calls),
      steered: (count) => this.d.events?.steering?.(run, 'delivered', count),
      waitTokens: this.d.waitTokens,
      schemaGuard: this.d.schemaGuard,
      maxWaits: this.d.config.MAX_WAITS_PER_RUN,
      rateLimits: this.d.rateLimits,
      budgets: this.budgets,
      budgetRefused: (action) => this.d.events?.budgetRefused?.(run, action),
      mcpCalled: (notice) => this.d.events?.mcpCall?.(run, notice),
      trace,
    });
    const ended = (outcome: AttemptOutcome): AgentEnded => ({ outcome, memory, progress: state });
    let out: AgentResult | string | typeof STOPPED;
    try {
      // The agent answers, or it ends up waiting on waits only (parked), or reaches a step to block on.
      // In the attempt's span: the agent's steps, and spans its own libraries make, nest under it.
      out = await untilAborted(Promise.race([Promise.resolve().then(() => trace.within(() => agent.run(state.ctx))), state.ended]), signal);
    } catch (err) {
      // The context's verdict first: the RunBlocked it threw may come back wrapped, or as another error.
      return ended(state.stopped() ?? thrown(err));
    }
    const stopped = state.stopped();
    if (stopped) return ended(stopped);
    if (signal.aborted) return ended(abortOutcome(signal.reason));
    // `ended` resolves only once the context has its verdict.
    if (out === STOPPED) return ended({ kind: 'broken', error: 'the run context ended without an outcome' });
    // A return value that is no answer is the agent's bug: fail the run (thrown out of here it
    // would leave the run leased, to be recovered into the same bug again and again).
    let result: Answer;
    try {
      result = normalize(out);
    } catch (err) {
      return ended(thrown(err));
    }
    if (run.outputSchema && result.finishReason === 'stop') {
      try {
        result.payload = await validateOutput(run.outputSchema, result, this.d.schemaGuard, run.scope);
      } catch (err) {
        // Anything else (the guard closing at shutdown) is classified like an agent error,
        // never thrown out of here, where it would leave the run leased.
        if (!(err instanceof OutputInvalidError)) return ended(thrown(err));
        const { payload: _unvalidated, ...answer } = result;
        return ended({
          kind: 'failed', result: { ...answer, finishReason: 'error' },
          error: { code: err.code, message: err.message, details: err.errors },
        });
      }
    } else if (run.outputSchema) {
      // A truncated answer is not a goal finish: it is not validated, so it carries no payload.
      delete result.payload;
    }
    // Validation waits on the schema thread: a cancel or a lost lease may have come meanwhile.
    if (signal.aborted) return ended(abortOutcome(signal.reason));
    return ended({ kind: 'succeeded', result });
  }
}

/** How the agent's part of an attempt ended, with what the closing reads of it. */
interface AgentEnded {
  outcome: AttemptOutcome;
  memory?: RunMemory;
  progress?: Progress;
}

function normalize(out: AgentResult | string): Omit<RunResult, 'toolCallsSeen'> {
  if (typeof out === 'string') return { answer: out, finishReason: 'stop' };
  if (!out || typeof out.answer !== 'string') {
    throw new TypeError('an agent must return a string or { answer: string, payload?, finishReason? }');
  }
  const finishReason = out.finishReason ?? 'stop';
  if (typeof finishReason !== 'string') throw new TypeError('finishReason must be a string');
  const r: Omit<RunResult, 'toolCallsSeen'> = { answer: out.answer, finishReason };
  if (out.payload !== undefined) {
    // Stored as JSON: a payload that cannot be (a BigInt, a cycle, a throwing toJSON) is the
    // agent's error, found here rather than in the finish that would write it.
    try {
      JSON.stringify(out.payload);
    } catch (err) {
      // eslint-disable-next-line preserve-caught-error -- no cause: classify follows a cause's network code, and this is the agent's error
      throw new TypeError(`the payload cannot be stored as JSON: ${errorText(err)}`);
    }
    r.payload = out.payload;
  }
  return r;
}

/** Resolves with the agent's result, or rejects as soon as the signal aborts (an agent may ignore it). */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => { signal.removeEventListener('abort', onAbort); resolve(v); },
      (e) => { signal.removeEventListener('abort', onAbort); reject(e); },
    );
  });
}
