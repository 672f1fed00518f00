import type { Redis } from 'ioredis';
import type { Agent, AgentResult, HistoryMessage } from '../sdk/agent.ts';
import { OutputInvalidError } from '../errors.ts';
import type { Config } from '../config.ts';
import type { Dispatcher, JobData } from './dispatcher.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import { EventWriter } from '../streams/writer.ts';
import { LeaseKeeper, RunAbort } from './lease-keeper.ts';
import { ContextState, RunBlocked, type MemoEvents } from './context.ts';
import { flatToObject, parseRunRecord, type RunError, type RunRecord, type RunResult, type SessionMessage } from './record.ts';
import { runScript } from './scripts.ts';
import { LeaseLostError } from './script-codes.ts';
import { backoffMs, classify } from './retry-policy.ts';
import { RunMemory } from '../sessions/run-memory.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';
import type { AgentInput, ArtifactStore } from '../artifacts/artifact-store.ts';
import { RedisArtifactStore } from '../artifacts/redis-store.ts';
import { resolveInputArtifacts } from '../artifacts/resolve.ts';
import { validateOutput } from './output-schema.ts';

export type Outcome = { kind: 'done' } | { kind: 'later'; at: number };

/** Hooks for metrics; every one optional so the executor does not depend on prom-client. */
export interface ExecutorEvents extends Partial<MemoEvents> {
  started?(run: RunRecord, recovered: boolean): void;
  finished?(run: RunRecord, status: 'succeeded' | 'failed' | 'cancelled'): void;
  retried?(run: RunRecord): void;
  blocked?(run: RunRecord): void;
  /** An event-log append of this run landed: `events` entries, `tokens` token deltas among them. */
  appended?(run: RunRecord, events: number, tokens: number): void;
}

export interface ExecutorDeps {
  redis: Redis;
  keys: Keys;
  config: Config;
  dispatcher: Dispatcher;
  leases: LeaseKeeper;
  agents: ReadonlyMap<string, Agent>;
  workerId: string;
  log: Logger;
  events?: ExecutorEvents;
  /** Where input artifacts are read from; the Redis store when absent. */
  artifacts?: ArtifactStore;
}

interface Claimed {
  run: RunRecord;
  fence: number;
  recovered: boolean;
  steps: Record<string, string>;
  /** The built-in store's session history as the claim read it (JSON messages). */
  history: string[];
}

/**
 * Executes one delivery of a run: claim (fenced lease), run the agent with a RunContext,
 * then exactly one closing transition: finish, retry, block, or hand-over at shutdown.
 * Every write carries the fence from the claim; once another worker takes over, nothing
 * this attempt does can land.
 */
export class RunExecutor {
  /** `{agent: maxAttempts}` of the agents that declare a default; the claim applies it to a run's first attempt. */
  private readonly attemptDefaults: string;
  private readonly artifacts: ArtifactStore;

  constructor(private readonly d: ExecutorDeps) {
    this.artifacts = d.artifacts ?? new RedisArtifactStore(d.redis, d.keys, d.config.RETENTION_MS);
    const defaults: Record<string, number> = {};
    for (const [name, agent] of d.agents) if (agent.maxAttempts !== undefined) defaults[name] = agent.maxAttempts;
    this.attemptDefaults = Object.keys(defaults).length ? JSON.stringify(defaults) : '';
  }

  async execute(job: JobData): Promise<Outcome> {
    const { keys, config: c } = this.d;
    const sk = keys.scope(job.scope);
    const reply = await runScript(this.d.redis, 'claim', [sk.run(job.runId)], [
      sk.base, job.runId, this.d.workerId, c.LEASE_MS, c.EVENTS_MAX_LEN, c.MAX_ACTIVE_PER_SCOPE,
      c.DISPATCH_GRACE_MS, c.RETENTION_MS, this.attemptDefaults,
    ]);
    const code = Number(reply[0]);
    if (code === 1) {
      await this.d.dispatcher.dispatch(job.scope, String(reply[1]));
      // Cancelled by this claim (requested while no live worker held it): reported here, where it happened.
      if (this.d.events?.finished) {
        const cancelled = parseRunRecord(await this.d.redis.hgetall(sk.run(job.runId)));
        if (cancelled) this.d.events.finished(cancelled, 'cancelled');
      }
      return { kind: 'done' };
    }
    // Held by a live lease (a duplicate delivery) or a retry not yet due: look again then.
    if (code === -4) return { kind: 'later', at: Number(reply[1]) };
    // Parked by a drain: the slot it gave up may have been handed to another run.
    if (code === -6) {
      await this.d.dispatcher.dispatch(job.scope, String(reply[1]));
      return { kind: 'done' };
    }
    // Unknown, finished, queued, blocked or parked by a drain: this delivery has nothing to do.
    if (code < 0) return { kind: 'done' };
    const run = parseRunRecord(reply[4] as string[]);
    if (!run) return { kind: 'done' };
    return this.runClaimed({
      run,
      fence: Number(reply[1]),
      recovered: Number(reply[3]) === 1,
      steps: flatToObject(reply[5] as string[]),
      history: reply[6] as string[],
    });
  }

  private async runClaimed({ run, fence, recovered, steps, history: claimedHistory }: Claimed): Promise<Outcome> {
    const { redis, keys, config: c } = this.d;
    const sk = keys.scope(run.scope);
    const runKey = sk.run(run.id);
    const log = this.d.log.child({
      scope: run.scope, runtime: run.runtime, runId: run.id, sessionId: run.sessionId, workerId: this.d.workerId,
    });
    log.info({ attempt: run.attempt, fence, recovered }, recovered ? 'run recovered' : 'run started');
    this.d.events?.started?.(run, recovered);

    const controller = new AbortController();
    this.d.leases.hold(runKey, sk.base, run.id, fence, controller);
    const writer = new EventWriter({
      redis, runKey, base: sk.base, runId: run.id, fence,
      maxLen: c.EVENTS_MAX_LEN, flushMs: c.EMIT_FLUSH_MS, flushTokens: c.EMIT_FLUSH_TOKENS,
      onLeaseLost: () => controller.abort(new RunAbort('lease-lost')),
      onWritten: (events, tokens) => this.d.events?.appended?.(run, events, tokens),
    });
    const close = new Closer(this.d, run, fence, runKey, sk.base, writer, log, controller.signal);
    try {
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
        close.memory = await RunMemory.open(agent, run, redis, keys, claimedHistory, { log, signal: controller.signal });
        ({ history, memoryBlocks } = await close.memory.context());
        input = await resolveInputArtifacts(this.artifacts, run.scope, run.input);
      } catch (err) {
        return await close.failure(err, controller.signal);
      }
      const state = new ContextState({
        redis, runKey, base: sk.base, run, fence, agent, history, memoryBlocks, input, steps, writer,
        signal: controller.signal, log, memo: this.d.events as MemoEvents | undefined,
        block: (stepKey) => close.block(stepKey),
      });
      close.state = state;
      let out: AgentResult | string;
      try {
        out = await untilAborted(Promise.resolve().then(() => agent.run(state.ctx)), controller.signal);
      } catch (err) {
        return await close.failure(err, controller.signal);
      }
      if (controller.signal.aborted) return await close.aborted(controller.signal.reason);
      // A return value that is no answer is the agent's bug: fail the run (thrown out of here it
      // would leave the run leased, to be recovered into the same bug again and again).
      let result: ReturnType<typeof normalize>;
      try {
        result = normalize(out);
      } catch (err) {
        return await close.failure(err, controller.signal);
      }
      if (run.outputSchema && result.finishReason === 'stop') {
        try {
          result.payload = validateOutput(run.outputSchema, result);
        } catch (err) {
          if (!(err instanceof OutputInvalidError)) throw err;
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
      await close.finish('succeeded', result);
      return { kind: 'done' };
    } catch (err) {
      if (err instanceof LeaseLostError) {
        log.warn('lease lost; this attempt stops writing');
        return { kind: 'done' };
      }
      throw err;
    } finally {
      this.d.leases.release(runKey, fence);
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
    private readonly fence: number,
    private readonly runKey: string,
    private readonly base: string,
    private readonly writer: EventWriter,
    private readonly log: Logger,
    private readonly signal: AbortSignal,
  ) {}

  async failure(err: unknown, signal: AbortSignal): Promise<Outcome> {
    if (err instanceof LeaseLostError) throw err;
    if (err instanceof RunBlocked) return { kind: 'done' };
    if (signal.aborted) return this.aborted(signal.reason);
    const cls = classify(err);
    const lastError: RunError = { code: cls.code, message: cls.message.slice(0, 2000) };
    if (cls.kind === 'permanent' && cls.details !== undefined) lastError.details = cls.details;
    this.log.warn({ err: lastError, kind: cls.kind, attempt: this.run.attempt }, 'attempt failed');
    if (cls.kind === 'transient' && this.run.attempt < this.run.maxAttempts) {
      const c = this.d.config;
      const delay = backoffMs(this.run.attempt, c.RETRY_BASE_MS, c.RETRY_MAX_MS, cls.retryAfterMs);
      await this.flushBeforeClosing();
      const reply = await runScript(this.d.redis, 'retry', [this.runKey], [
        this.base, this.run.id, this.fence, delay, JSON.stringify(lastError), c.EVENTS_MAX_LEN, c.DISPATCH_GRACE_MS,
      ]);
      if (Number(reply[0]) === -2) throw new LeaseLostError(this.run.id);
      await this.d.dispatcher.dispatch(this.run.scope, String(reply[2]));
      this.d.events?.retried?.(this.run);
      this.log.info({ retryAt: Number(reply[1]), delay }, 'run retrying');
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
      const reply = await runScript(this.d.redis, 'release', [this.runKey], [
        this.base, this.run.id, this.fence, this.d.config.DISPATCH_GRACE_MS,
      ]);
      if (Number(reply[0]) === -2) throw new LeaseLostError(this.run.id);
      await this.d.dispatcher.dispatch(this.run.scope, String(reply[1]));
      this.log.info('run handed over at shutdown');
      return { kind: 'done' };
    }
    await this.finish('cancelled', this.partial('cancelled'));
    return { kind: 'done' };
  }

  async block(stepKey: string): Promise<void> {
    const c = this.d.config;
    await this.flushBeforeClosing();
    const blocked = {
      stepKey,
      reason: 'a non-idempotent step was started by an earlier attempt and recorded no result',
      since: Date.now(),
    };
    const reply = await runScript(this.d.redis, 'block', [this.runKey], [
      this.base, this.run.id, this.fence, JSON.stringify(blocked), c.EVENTS_MAX_LEN, c.MAX_ACTIVE_PER_SCOPE,
      c.DISPATCH_GRACE_MS,
    ]);
    if (Number(reply[0]) === -2) throw new LeaseLostError(this.run.id);
    await this.d.dispatcher.dispatch(this.run.scope, String(reply[1]));
    this.d.events?.blocked?.(this.run);
    this.log.warn({ stepKey }, 'run blocked');
  }

  /** What an unfinished attempt produced: its streamed text, committed as incomplete. */
  private partial(finishReason: string): RunResult {
    return { answer: this.state?.emitted ?? '', finishReason, toolCallsSeen: this.state?.toolCallsSeen ?? 0 };
  }

  async finish(
    status: 'succeeded' | 'failed' | 'cancelled',
    result: Omit<RunResult, 'toolCallsSeen'> & { toolCallsSeen?: number } = { answer: '', finishReason: 'error' },
    lastError?: RunError,
  ): Promise<void> {
    const c = this.d.config;
    const full: RunResult = { ...result, toolCallsSeen: result.toolCallsSeen ?? this.state?.toolCallsSeen ?? 0 };
    let turn: SessionMessage[] = [];
    if (this.memory && !this.commitFailed) {
      try {
        turn = await this.memory.commit(turnMessages(this.run, full, status), () => this.assertLease());
      } catch (err) {
        if (err instanceof LeaseLostError) throw err;
        // The answer exists but its history could not be stored: not a success. Retried
        // when the store's error is transient (memoized steps make that cheap), else failed.
        this.commitFailed = true;
        this.log.warn({ err: (err as Error).message }, 'memory store could not commit the turn');
        await this.failure(err, this.signal);
        return;
      }
    }
    const [user, assistant] = turn.length ? turn.map((m) => JSON.stringify(m)) : ['', ''];
    await this.flushBeforeClosing();
    const reply = await runScript(this.d.redis, 'finish', [this.runKey], [
      this.base, this.run.id, this.fence, status, JSON.stringify(full), lastError ? JSON.stringify(lastError) : '',
      user, assistant, c.EVENTS_MAX_LEN, c.MAX_ACTIVE_PER_SCOPE, c.DISPATCH_GRACE_MS, c.RETENTION_MS,
    ]);
    if (Number(reply[0]) === -2) throw new LeaseLostError(this.run.id);
    await this.d.dispatcher.dispatch(this.run.scope, String(reply[1]));
    this.d.events?.finished?.(this.run, status);
    this.log.info({ status, finishReason: full.finishReason }, 'run finished');
  }

  /** A fenced lease renewal: proves this attempt still owns the run before it writes outside Redis. */
  private async assertLease(): Promise<void> {
    const reply = await runScript(this.d.redis, 'heartbeat', [this.runKey], [
      this.base, this.run.id, this.fence, this.d.config.LEASE_MS,
    ]);
    if (Number(reply[0]) === -2) throw new LeaseLostError(this.run.id);
  }

  /**
   * The closing script carries the `end` event, so every event of the attempt must be in the
   * log before it runs: a token batch left behind is a hole in every client's answer (the
   * chaos soak caught one when Redis restarted during a finish). A failed write is retried
   * (the writer resends the same batch, applied once) for up to LEASE_MS; past that the lease
   * is as good as gone, and the error ends the attempt without closing it: the run is then
   * recovered and its next holder streams the answer again.
   */
  private async flushBeforeClosing(): Promise<void> {
    const giveUpAt = Date.now() + this.d.config.LEASE_MS;
    for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
      try {
        return await this.writer.flush();
      } catch (err) {
        if (err instanceof LeaseLostError || Date.now() + delay > giveUpAt) throw err;
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
  const r: Omit<RunResult, 'toolCallsSeen'> = { answer: out.answer, finishReason: out.finishReason ?? 'stop' };
  if (out.payload !== undefined) r.payload = out.payload;
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
