import type { Redis } from 'ioredis';
import type { Agent, AgentResult, HistoryMessage, ModelCallUsage } from '../sdk/agent.ts';
import { OutputInvalidError } from '../sdk/errors.ts';
import type { Config } from '../config.ts';
import type { JobData } from './dispatcher.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import { EventWriter } from '../streams/writer.ts';
import type { LeaseKeeper } from './lease-keeper.ts';
import { Attempt, RunAbort } from './attempt.ts';
import { ContextState, PARKED, RunBlocked, RunWaiting, type MemoEvents } from './context.ts';
import { parseRunRecord, type RunError, type RunRecord, type RunResult, type SessionMessage } from './record.ts';
import { LeaseLostError } from './script-codes.ts';
import type { ClaimReply, ParkReply, Transitions } from './transitions.ts';
import type { WaitTokens } from './wait-tokens.ts';
import type { TerminalStatus } from '../contract/runs.ts';
import { backoffMs, classify } from './retry-policy.ts';
import { RunMemory } from '../sessions/run-memory.ts';
import { claimHistoryReads } from '../sessions/memory-session.ts';
import { isRedisUnavailable } from '../redis.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';
import type { AgentInput, ArtifactStore } from '../artifacts/artifact-store.ts';
import { resolveInputArtifacts } from '../artifacts/resolve.ts';
import { validateOutput } from './output-schema.ts';
import { RUN_LIMIT_CODES } from '../contract/runs.ts';
import type { SchemaGuard } from './schema-guard.ts';

export type Outcome = { kind: 'done' } | { kind: 'later'; at: number };

/** Hooks for metrics; every one optional so the executor does not depend on prom-client. */
export interface ExecutorEvents extends Partial<MemoEvents> {
  started?(run: RunRecord, recovered: boolean): void;
  finished?(run: RunRecord, status: TerminalStatus): void;
  /** The attempt ended waiting (the park's reply says which waits it found answered by then). */
  waiting?(run: RunRecord, park: ParkReply): void;
  retried?(run: RunRecord): void;
  blocked?(run: RunRecord): void;
  /** An event-log append of this run landed: `events` entries, `tokens` token deltas among them. */
  appended?(run: RunRecord, events: number, tokens: number): void;
  /** Model calls of `agent` were counted with a step this worker stored (once per call made). */
  modelUsage?(run: RunRecord, agent: string, calls: readonly ModelCallUsage[]): void;
}

export interface ExecutorDeps {
  redis: Redis;
  keys: Keys;
  config: Config;
  transitions: Transitions;
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

  constructor(private readonly d: ExecutorDeps) {
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
        if (claim.status === 'failed') this.d.log.warn({ scope: job.scope, runId: job.runId }, 'run failed at its claim (timeoutMs or recovery limit)');
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

  private async runClaimed({ run, fence, recovered, steps, history: claimedHistory, historyCut, deadline, now }: Claimed): Promise<Outcome> {
    const { redis, keys, config: c, transitions } = this.d;
    const attempt = new Attempt(run, fence, keys.scope(run.scope));
    // Not workerId or runtime: the worker's logger has them, and a child would repeat them.
    const log = this.d.log.child({ scope: run.scope, runId: run.id, sessionId: run.sessionId });
    log.info({ attempt: run.attempt, fence, recovered }, recovered ? 'run recovered' : 'run started');
    this.d.events?.started?.(run, recovered);

    this.d.leases.hold(attempt);
    const writer = new EventWriter({
      transitions, attempt, flushMs: c.EMIT_FLUSH_MS, flushTokens: c.EMIT_FLUSH_TOKENS,
      onLeaseLost: () => attempt.abort('lease-lost'),
      onWritten: (events, tokens) => this.d.events?.appended?.(run, events, tokens),
    });
    const close = new Closer(this.d, run, attempt, writer, log);
    const { signal } = attempt;
    // timeoutMs: the claim said when the budget ends (Redis time, so the delay is measured on
    // one clock); the run's code is stopped then and the run fails with TIMEOUT.
    const budget = deadline === undefined ? undefined : setTimeout(() => attempt.abort('timeout'), Math.max(0, deadline - now));
    // What is left of MAX_RUN_MS after the attempts before this one: then the signal aborts.
    const budgetMs = c.MAX_RUN_MS - (run.runMs ?? 0);
    const ceiling = setTimeout(() => attempt.abort('run-limit'), Math.max(0, budgetMs));
    try {
      if (budgetMs <= 0) return await close.aborted(new RunAbort('run-limit'));
      const agent = this.d.agents.get(run.agent);
      if (!agent) {
        await close.finish('failed', undefined, { code: 'UNKNOWN_AGENT', message: `no agent "${run.agent}" in this worker` });
        return { kind: 'done' };
      }
      // A store that cannot be opened or read, recall's embeddings and the input artifacts fail
      // the attempt like the agent would (classified, maybe retried).
      let history: HistoryMessage[];
      let memoryBlocks: MemoryBlocks;
      let input: AgentInput;
      try {
        if (historyCut) log.info({ messages: claimedHistory.length, maxBytes: c.HISTORY_READ_MAX_BYTES }, 'history cut to the newest messages that fit HISTORY_READ_MAX_BYTES');
        close.memory = await RunMemory.open(agent, run, redis, keys, claimedHistory, { log, signal, historyCut });
        ({ history, memoryBlocks } = await close.memory.context());
        input = await resolveInputArtifacts(this.d.artifacts, run.scope, run.input);
      } catch (err) {
        return await close.failure(err);
      }
      const state = new ContextState({
        transitions, attempt, run, agent, history, memoryBlocks, input, steps, writer, log,
        memo: this.d.events as MemoEvents | undefined,
        usageCounted: (agentName, calls) => this.d.events?.modelUsage?.(run, agentName, calls),
        block: (stepKey) => close.block(stepKey),
        waitTokens: this.d.waitTokens,
        schemaGuard: this.d.schemaGuard,
        maxWaits: this.d.config.MAX_WAITS_PER_RUN,
      });
      close.state = state;
      let out: AgentResult | string | typeof PARKED;
      try {
        // The agent answers, or it ends up waiting on waits only (then the attempt parks).
        out = await untilAborted(Promise.race([Promise.resolve().then(() => agent.run(state.ctx)), state.parked]), signal);
      } catch (err) {
        return await close.failure(err);
      }
      if (out === PARKED) return await close.park(state);
      if (signal.aborted) return await close.aborted(signal.reason);
      // A return value that is no answer is the agent's bug: fail the run (thrown out of here it
      // would leave the run leased, to be recovered into the same bug again and again).
      let result: ReturnType<typeof normalize>;
      try {
        result = normalize(out);
      } catch (err) {
        return await close.failure(err);
      }
      if (run.outputSchema && result.finishReason === 'stop') {
        try {
          result.payload = await validateOutput(run.outputSchema, result, this.d.schemaGuard, run.scope);
        } catch (err) {
          // Anything else (the guard closing at shutdown) is classified like an agent error,
          // never thrown out of here, where it would leave the run leased.
          if (!(err instanceof OutputInvalidError)) return await close.failure(err);
          const { payload: _unvalidated, ...answer } = result;
          await close.finish('failed', { ...answer, finishReason: 'error' }, {
            code: err.code, message: err.message, details: err.errors,
          });
          return { kind: 'done' };
        }
      } else if (run.outputSchema) {
        // A truncated answer is not a goal finish: it is not validated, so it carries no payload.
        delete result.payload;
      }
      // Validation waits on the schema thread: a cancel or a lost lease may have come meanwhile.
      if (signal.aborted) return await close.aborted(signal.reason);
      await close.finish('succeeded', result);
      return { kind: 'done' };
    } catch (err) {
      if (err instanceof LeaseLostError) {
        log.warn('lease lost; this attempt stops writing');
        return { kind: 'done' };
      }
      // Redis out of reach, or the attempt's events could not be written: nothing this attempt
      // writes now would land (or it would leave a hole before `end`). The lease runs out and
      // the run is taken over, at most MAX_RECOVERIES times.
      if (isRedisUnavailable(err) || err instanceof EventsUnwritten) {
        log.warn({ err: errorText(err) }, 'attempt left unclosed; the run is taken over once its lease ends');
        return { kind: 'done' };
      }
      // Anything else thrown on the way out (a transition refusing a value, a hook, a bug) would
      // leave the run leased and recovered into the same throw forever: close it as failed.
      return await close.lastResort(err);
    } finally {
      clearTimeout(budget);
      clearTimeout(ceiling);
      this.d.leases.release(attempt);
      writer.close();
    }
  }
}

/** The closing transitions of one attempt. */
class Closer {
  state: ContextState | undefined;
  memory: RunMemory | undefined;
  /** Set once a custom store refused the turn, so the closing transition that follows does not try again. */
  private commitFailed = false;

  constructor(
    private readonly d: ExecutorDeps,
    private readonly run: RunRecord,
    private readonly attempt: Attempt,
    private readonly writer: EventWriter,
    private readonly log: Logger,
  ) {}

  async failure(err: unknown): Promise<Outcome> {
    if (err instanceof LeaseLostError) throw err;
    if (err instanceof RunBlocked || err instanceof RunWaiting) return { kind: 'done' };
    const { signal } = this.attempt;
    if (signal.aborted) return this.aborted(signal.reason);
    const cls = classify(err);
    const lastError: RunError = { code: cls.code, message: cls.message.slice(0, 2000) };
    // Details come from the agent's error (`errors` of a PermanentError): kept only when they are JSON.
    if (cls.kind === 'permanent' && cls.details !== undefined && jsonOrUndefined(cls.details) !== undefined) {
      lastError.details = cls.details;
    }
    this.log.warn({ err: lastError, kind: cls.kind, attempt: this.run.attempt }, 'attempt failed');
    if (cls.kind === 'transient' && this.run.attempt < this.run.maxAttempts) {
      const c = this.d.config;
      const delayMs = backoffMs(this.run.attempt, c.RETRY_BASE_MS, c.RETRY_MAX_MS, cls.retryAfterMs);
      await this.flushBeforeClosing();
      const retryAt = await this.d.transitions.retry(this.attempt, { delayMs, lastError: JSON.stringify(lastError) });
      this.d.events?.retried?.(this.run);
      this.log.info({ retryAt, delay: delayMs }, 'run retrying');
      return { kind: 'done' };
    }
    await this.finish('failed', this.partial('error'), lastError);
    return { kind: 'done' };
  }

  async aborted(reason: unknown): Promise<Outcome> {
    const why = reason instanceof RunAbort ? reason.reason : 'cancelled';
    if (why === 'lease-lost') throw new LeaseLostError(this.run.id);
    if (why === 'shutdown') {
      await this.flushBeforeClosing();
      await this.d.transitions.release(this.attempt);
      this.log.info('run handed over at shutdown');
      return { kind: 'done' };
    }
    // The attempt parked already; whatever the agent did after that is nobody's answer.
    if (why === 'waiting') return { kind: 'done' };
    if (why === 'timeout') {
      // As for a cancel: the answer so far is committed, marked incomplete.
      await this.finish('failed', this.partial('timeout'), {
        code: 'TIMEOUT', message: `the run used up its timeoutMs (${this.run.timeoutMs} ms of running, waits excluded)`,
      });
      return { kind: 'done' };
    }
    if (why === 'run-limit') {
      await this.finish('failed', this.partial('error'), {
        code: RUN_LIMIT_CODES.RUN_TIMEOUT,
        message: `the run was held by workers for MAX_RUN_MS (${this.d.config.MAX_RUN_MS} ms) in all and was stopped`,
      });
      return { kind: 'done' };
    }
    await this.finish('cancelled', this.partial('cancelled'));
    return { kind: 'done' };
  }

  /**
   * The agent waits on waits only: the attempt ends waiting (lua/wait.lua). Its events are
   * flushed first, so the `status: waiting` event follows every token of the attempt. Then
   * the attempt's signal aborts ('waiting'): the agent's pending waits reject with RunWaiting
   * and nothing it still does can write.
   */
  async park(state: ContextState): Promise<Outcome> {
    const waits = state.waitRequests();
    await this.flushBeforeClosing();
    const reply = await this.d.transitions.wait(this.attempt, waits);
    if (reply.cancelRequested) {
      this.attempt.abort('cancelled');
      await this.finish('cancelled', this.partial('cancelled'));
      return { kind: 'done' };
    }
    this.attempt.abort('waiting');
    this.d.events?.waiting?.(this.run, reply);
    if (reply.nextAt !== undefined) this.d.wakeAt?.(this.run.scope, this.run.id, reply.nextAt);
    this.log.info({ waits: waits.map((w) => w.key), admittedAgain: reply.admittedAgain }, 'run waiting');
    return { kind: 'done' };
  }

  async block(stepKey: string): Promise<void> {
    await this.flushBeforeClosing();
    await this.d.transitions.block(this.attempt, {
      stepKey,
      reason: 'a non-idempotent step was started by an earlier attempt and recorded no result',
      since: Date.now(),
    });
    this.d.events?.blocked?.(this.run);
    this.log.warn({ stepKey }, 'run blocked');
  }

  /** What an unfinished attempt produced: its streamed text, committed as incomplete. */
  private partial(finishReason: string): RunResult {
    return { answer: this.state?.emitted ?? '', finishReason, toolCallsSeen: this.state?.toolCallsSeen ?? 0 };
  }

  /** Every model call counted for the run so far, earlier attempts included; none: absent. */
  private usage(): Pick<RunResult, 'usage'> {
    const usage = this.state?.usage ?? this.run.usage;
    return usage && usage.modelCalls > 0 ? { usage: { ...usage } } : {};
  }

  async finish(
    status: 'succeeded' | 'failed' | 'cancelled',
    result: Omit<RunResult, 'toolCallsSeen'> & { toolCallsSeen?: number } = { answer: '', finishReason: 'error' },
    lastError?: RunError,
  ): Promise<void> {
    const full: RunResult = { ...result, toolCallsSeen: result.toolCallsSeen ?? this.state?.toolCallsSeen ?? 0, ...this.usage() };
    let turn: SessionMessage[] = [];
    if (this.memory && !this.commitFailed) {
      try {
        turn = await this.memory.commit(turnMessages(this.run, full, status), () => this.d.transitions.assertLease(this.attempt));
      } catch (err) {
        if (err instanceof LeaseLostError) throw err;
        // The answer exists but its history could not be stored: not a success. Retried
        // when the store's error is transient (memoized steps make that cheap), else failed.
        this.commitFailed = true;
        this.log.warn({ err: errorText(err) }, 'memory store could not commit the turn');
        await this.failure(err);
        return;
      }
    }
    // The last events ride with the finish, in its script call: the `end` event follows them.
    const last = await this.flushBeforeClosing(() => this.writer.finalBatch());
    await this.d.transitions.finish(this.attempt, {
      status,
      result: JSON.stringify(full),
      lastError: lastError ? JSON.stringify(lastError) : undefined,
      turn: turn.length ? [JSON.stringify(turn[0]), JSON.stringify(turn[1])] : undefined,
    }, last);
    if (last) this.writer.acknowledge(last);
    this.d.events?.finished?.(this.run, status);
    this.log.info({ status, finishReason: full.finishReason }, 'run finished');
  }

  /**
   * The closing of last resort, after something threw on the way out: the run fails with
   * CLOSE_FAILED, its streamed text as the answer. No turn is committed (the store may be what
   * threw) and nothing of the agent's result is written but that text, so this finish cannot
   * fail on the value that made the first one fail. If even this cannot be written, the run
   * is left to be taken over (bounded by MAX_RECOVERIES).
   */
  async lastResort(err: unknown): Promise<Outcome> {
    const lastError: RunError = {
      code: RUN_LIMIT_CODES.CLOSE_FAILED,
      message: `the attempt could not be closed: ${errorText(err)}`.slice(0, 2000),
    };
    this.log.error({ err: errorText(err) }, 'closing the attempt failed; failing the run');
    try {
      // One try, no retries: a flush that fails here would leave a hole before `end`.
      await this.writer.flush();
      await this.d.transitions.finish(this.attempt, {
        status: 'failed', result: JSON.stringify({ ...this.partial('error'), ...this.usage() }), lastError: JSON.stringify(lastError),
      });
      this.d.events?.finished?.(this.run, 'failed');
    } catch (again) {
      if (!(again instanceof LeaseLostError)) {
        this.log.error({ err: errorText(again) }, 'the run could not be failed either; it is taken over once its lease ends');
      }
    }
    return { kind: 'done' };
  }

  /**
   * The closing script carries the `end` event, so every event of the attempt must be in the
   * log before it runs: a token batch left behind is a hole in every client's answer (the
   * chaos soak caught one when Redis restarted during a finish). A failed write is retried
   * (the writer resends the same batch, applied once) for up to LEASE_MS; past that the lease
   * is as good as gone, and the error ends the attempt without closing it: the run is then
   * recovered and its next holder streams the answer again.
   */
  private async flushBeforeClosing(): Promise<void>;
  private async flushBeforeClosing<T>(write: () => Promise<T>): Promise<T>;
  private async flushBeforeClosing(write: () => Promise<unknown> = () => this.writer.flush()): Promise<unknown> {
    const giveUpAt = Date.now() + this.d.config.LEASE_MS;
    for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
      try {
        return await write();
      } catch (err) {
        if (err instanceof LeaseLostError) throw err;
        if (Date.now() + delay > giveUpAt) throw new EventsUnwritten(err);
        this.log.warn({ err: (err as Error).message }, 'could not write events before closing the run; trying again');
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }
}

/**
 * The turn to commit: user message and answer together, or nothing when there is no
 * answer text (no dangling user message). Anything but a goal finish is marked incomplete.
 */
function turnMessages(run: RunRecord, result: RunResult, status: string): SessionMessage[] {
  if (!result.answer) return [];
  const now = Date.now();
  const user: SessionMessage = { role: 'user', content: run.input.content, runId: run.id, createdAt: run.createdAt };
  const assistant: SessionMessage = { role: 'assistant', content: result.answer, runId: run.id, createdAt: now };
  if (status !== 'succeeded' || result.finishReason !== 'stop') assistant.incomplete = true;
  return [user, assistant];
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
      throw new TypeError(`the payload cannot be stored as JSON: ${errorText(err)}`);
    }
    r.payload = out.payload;
  }
  return r;
}

/** The attempt's events could not be written before closing it, for as long as its lease lasts. */
class EventsUnwritten extends Error {
  constructor(cause: unknown) {
    super(`the attempt's events could not be written: ${errorText(cause)}`, { cause });
    this.name = 'EventsUnwritten';
  }
}

/** A thrown value as text, whatever it is (an agent may throw anything). */
function errorText(err: unknown): string {
  try {
    return String((err as Error | undefined)?.message ?? err);
  } catch {
    return 'an unreadable value';
  }
}

function jsonOrUndefined(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
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
