import type { Logger } from '../logger.ts';
import type { RunMemory } from '../sessions/run-memory.ts';
import type { EventWriter } from '../streams/writer.ts';
import { RUN_LIMIT_CODES, type TerminalStatus, type UsageTotals } from '../contract/runs.ts';
import type { Config } from '../config/index.ts';
import type { ModelCallUsage } from '../sdk/agent.ts';
import type { McpCallNotice } from '../sdk/agent-reports.ts';
import type { Attempt } from '../transitions/attempt.ts';
import type { MemoEvents } from './context-deps.ts';
import type { ParkReply } from '../transitions/wait.ts';
import type { AttemptGateway } from '../transitions/attempt-gateway.ts';
import { errorText, thrownOutcome, writeFailure, type Answer, type AttemptOutcome } from './outcome.ts';
import type { RunError, RunRecord, RunResult, SessionMessage } from '../transitions/record.ts';
import { LeaseLostError, type Fenced } from '../transitions/script-codes.ts';
import { expiredWaitEnd, traceWaitsEnded, type AttemptTrace, type FinishTrace } from '../tracing/tracing.ts';

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
  /** A model call was refused by the scope's daily token budget: the run fails, or waits for the next day. */
  budgetRefused?(run: RunRecord, action: 'failed' | 'waiting'): void;
  /** An agent of the run made a request to an MCP server. */
  mcpCall?(run: RunRecord, notice: McpCallNotice): void;
  /** Steering messages of the run taken at a boundary reached for the first time, or left when this worker finished it. */
  steering?(run: RunRecord, outcome: 'delivered' | 'not-delivered', count: number): void;
}

/** What the attempt produced so far, read when it closes (the run context, or nothing yet). */
export interface Progress {
  /** Selected non-ephemeral text streamed in this attempt. */
  readonly emitted: string;
  readonly toolCallsSeen: number;
  /** The run's model usage, earlier attempts included. */
  readonly usage?: UsageTotals;
  /** Steering messages the run took, in order, each with the length of `emitted` when it was taken. */
  readonly steered?: readonly { id: string; content: string; after: number }[];
}

/** Everything closing one attempt needs, gathered once the agent's part has ended. */
export interface Closing {
  deps: {
    config: Config;
    events?: ExecutorEvents;
    /** Brings a parked run's earliest wait deadline forward to its moment (see ExecutorDeps.wakeAt). */
    wakeAt?(scope: string, runId: string, at: number): void;
  };
  /** The attempt's own gateway: every closing transition goes through it, fenced. */
  gateway: AttemptGateway;
  run: RunRecord;
  attempt: Attempt;
  writer: EventWriter;
  log: Logger;
  /** The session memory, once opened. */
  memory?: RunMemory;
  /** The run context, once made. */
  progress?: Progress;
  /** The attempt's span: told how the attempt closed; the finish gets a span of its own. */
  trace?: AttemptTrace;
}

type Ending = Extract<AttemptOutcome, { kind: 'succeeded' | 'failed' | 'aborted' }>;
/** An outcome that hands the run on: retried, blocked, parked, handed over at shutdown, or left unclosed. */
type Handing = Exclude<AttemptOutcome, Ending> | { kind: 'aborted'; reason: 'shutdown' };
type Refused = Extract<AttemptOutcome, { kind: 'lease-lost' | 'redis-lost' | 'events-unwritten' | 'broken' }>;
/** A write of the closing: what it answered, or the outcome its failure makes (see writeFailure). */
type Written<T> = { ok: true; value: T } | { ok: false; outcome: Refused };

/**
 * Closes the attempt for its outcome: called once per attempt, it issues at most one closing
 * transition (finish, retry, block, wait or release), which carries the attempt's last events
 * and, for a finish, its history turn. A turn a custom store refuses turns the outcome into
 * that error's (retried or failed) before the transition, never after. Never throws: returns
 * the outcome the attempt closed as, the given one or what a write of the closing made of it
 * (lease-lost, redis-lost, events-unwritten: no transition landed; broken: the run was failed
 * with CLOSE_FAILED instead).
 */
export async function closeAttempt(c: Closing, outcome: AttemptOutcome): Promise<AttemptOutcome> {
  // The custom store takes the turn first: its refusal is the outcome the transition closes.
  // What throws past the writes' own outcomes is a bug of Baton's: closed as broken, once.
  const closed = await storeTurn(c, outcome)
    .then(({ end, saved }) => (endsRun(end) ? finish(c, end, saved) : transition(c, end)))
    .catch((err: unknown): AttemptOutcome => ({ kind: 'broken', error: errorText(err) }));
  if (closed.kind === 'broken') return closeBroken(c, closed.error);
  if (closed.kind === 'lease-lost') {
    c.trace?.closed('lease-lost');
    c.log.warn('lease lost; this attempt stops writing');
  } else if (closed.kind === 'redis-lost' || closed.kind === 'events-unwritten') {
    // Nothing this attempt writes now would land (or it would leave a hole before `end`).
    c.trace?.closed('unclosed');
    c.log.warn({ err: closed.error, why: closed.kind }, 'attempt left unclosed; the run is taken over once its lease ends');
  }
  return closed;
}

/**
 * The one closing transition for an outcome that does not end the run (those go to finish):
 * returns the outcome closed, or what a failed write made of it.
 */
async function transition(c: Closing, outcome: Handing): Promise<AttemptOutcome> {
  const { events } = c.deps;
  const { gateway } = c;
  const { run, attempt, log } = c;
  switch (outcome.kind) {
    case 'lease-lost':
    case 'redis-lost':
    case 'events-unwritten':
    case 'broken':
      return outcome;
    case 'retrying': {
      const lastError = JSON.stringify(outcome.error);
      const sent = await flushThen(c, () => gateway.retry({ delayMs: outcome.delayMs, lastError }));
      if (!sent.ok) return sent.outcome;
      c.trace?.closed('retrying', { 'baton.attempt.retry_at': sent.value, 'error.type': outcome.error.code });
      hook(c, () => events?.retried?.(run));
      log.info({ retryAt: sent.value, delay: outcome.delayMs }, 'run retrying');
      return outcome;
    }
    case 'blocked': {
      const sent = await flushThen(c, () => gateway.block({
        stepKey: outcome.stepKey,
        reason: 'a non-idempotent step was started by an earlier attempt and recorded no result',
        since: Date.now(),
      }));
      if (!sent.ok) return sent.outcome;
      c.trace?.closed('blocked', { 'baton.step.key': outcome.stepKey });
      // The agent's code left behind (its other steps, its waits) must stop: the run is no longer this attempt's.
      attempt.abort('blocked');
      hook(c, () => events?.blocked?.(run));
      log.warn({ stepKey: outcome.stepKey }, 'run blocked');
      return outcome;
    }
    case 'parked': {
      // Events first, so the `status: waiting` event follows every token of the attempt.
      const sent = await flushThen(c, () => gateway.wait(outcome.waits));
      if (!sent.ok) return sent.outcome;
      const reply = sent.value;
      if (reply.cancelRequested) {
        // wait.lua did not park (a cancel came first): the run's one transition is the finish, cancelled.
        // A custom store takes the turn first, as for any finish; with the signal aborted its
        // refusal reads as the cancel itself (or a lost lease), so the end is one of those.
        attempt.abort('cancelled');
        const { end, saved: kept } = await storeTurn(c, { kind: 'aborted', reason: 'cancelled' });
        return endsRun(end) ? finish(c, end, kept) : end;
      }
      c.trace?.closed('waiting', { 'baton.attempt.waits': outcome.waits.length });
      // Waits whose deadline had passed ended in the park: their spans end now.
      traceWaitsEnded(run.traceparent, run.id, reply.answered, (w) => expiredWaitEnd(w.kind));
      // The agent's pending waits reject with RunWaiting, and nothing it still does can write.
      attempt.abort('waiting');
      hook(c, () => events?.waiting?.(run, reply));
      if (reply.nextAt !== undefined) c.deps.wakeAt?.(run.scope, run.id, reply.nextAt);
      log.info({ waits: outcome.waits.map((w) => w.key), admittedAgain: reply.admittedAgain }, 'run waiting');
      return outcome;
    }
    case 'aborted': {
      // The shutdown's hand-over: every other abort ends the run (endsRun).
      const sent = await flushThen(c, () => gateway.release());
      if (!sent.ok) return sent.outcome;
      c.trace?.closed('handed-over');
      log.info('run handed over at shutdown');
      return outcome;
    }
  }
}

/**
 * A custom store (one the finish does not write) takes the turn before the finish: refused,
 * the outcome becomes the store's error (retried when transient, memoized steps make that
 * cheap, else failed), never a success whose history was not stored. `saved`: the messages
 * it took (traced).
 */
async function storeTurn(c: Closing, outcome: AttemptOutcome): Promise<{ end: AttemptOutcome; saved: number }> {
  if (!endsRun(outcome) || !c.memory || c.memory.writtenByFinish) return { end: outcome, saved: 0 };
  const { result, status } = finishOf(c, outcome);
  const turn = turnMessages(c.run, result, status, c.progress?.steered ?? []);
  if (turn.length === 0) return { end: outcome, saved: 0 };
  try {
    await c.gateway.assertLease();
    await c.memory.save(turn);
    return { end: outcome, saved: turn.length };
  } catch (err) {
    // A lost lease is lease-lost (thrownOutcome); a refusal is the store's error.
    if (!(err instanceof LeaseLostError)) c.log.warn({ err: errorText(err) }, 'memory store could not commit the turn');
    return { end: thrownOutcome(err, c.attempt.signal, c.run, c.deps.config, c.log), saved: 0 };
  }
}

function endsRun(outcome: AttemptOutcome): outcome is Ending {
  return outcome.kind === 'succeeded' || outcome.kind === 'failed' || (outcome.kind === 'aborted' && outcome.reason !== 'shutdown');
}

/** Runs a hook (metrics): its failure is logged, never the run's. */
function hook(c: Closing, fn: () => void): void {
  try {
    fn();
  } catch (err) {
    c.log.error({ err: errorText(err) }, 'an executor hook threw');
  }
}

/** finish.lua: the run ends succeeded, failed or cancelled, with its last events and its turn (in a `baton.finish` span). */
async function finish(c: Closing, outcome: Ending, saved: number): Promise<AttemptOutcome> {
  const span = c.trace?.finishing();
  try {
    const { status, result, error } = finishOf(c, outcome);
    // Without a memory (no agent, or its store could not be opened) there is no turn; a custom
    // store took it already (storeTurn), or refused it and this finish is the refusal's.
    const turn = c.memory?.writtenByFinish ? turnMessages(c.run, result, status, c.progress?.steered ?? []) : [];
    // The last events ride with the finish, in its script call: the `end` event follows them.
    const last = await flushBeforeClosing(c, () => c.writer.finalBatch());
    if (!last.ok) return notWritten(last.outcome, span);
    const sent = await written(() => c.gateway.finish({
      status,
      result: JSON.stringify(result),
      lastError: error ? JSON.stringify(error) : undefined,
      turn: turn.length ? turn.map((m) => JSON.stringify(m)) : undefined,
    }, last.value));
    if (!sent.ok) return notWritten(sent.outcome, span);
    if (last.value) c.writer.acknowledge(last.value);
    span?.committed({
      status, finishReason: result.finishReason, historyMessages: saved + turn.length,
      store: !c.memory ? 'none' : c.memory.writtenByFinish ? 'redis' : 'custom',
    });
    c.trace?.closed(status, error ? { 'error.type': error.code } : {});
    hook(c, () => c.deps.events?.finished?.(c.run, status));
    const { notDelivered } = sent.value;
    if (notDelivered > 0) hook(c, () => c.deps.events?.steering?.(c.run, 'not-delivered', notDelivered));
    c.log.info({ status, finishReason: result.finishReason }, 'run finished');
    return outcome;
  } catch (err) {
    span?.failed(err);
    throw err;
  } finally {
    span?.end();
  }
}

function notWritten(outcome: Refused, span?: FinishTrace): Refused {
  span?.notWritten(outcome.kind);
  return outcome;
}

/** The status, result and error a finish writes for an outcome that ends the run. */
function finishOf(c: Closing, outcome: Ending): { status: 'succeeded' | 'failed' | 'cancelled'; result: RunResult; error?: RunError } {
  switch (outcome.kind) {
    case 'succeeded':
      return { status: 'succeeded', result: full(c, outcome.result) };
    case 'failed':
      return { status: 'failed', result: full(c, outcome.result ?? partial(c, 'error')), error: outcome.error };
    case 'aborted':
      // As for a cancel: the answer so far is committed, marked incomplete.
      if (outcome.reason === 'timeout') {
        return {
          status: 'failed', result: full(c, partial(c, 'timeout')),
          error: { code: 'TIMEOUT', message: `the run used up its timeoutMs (${c.run.timeoutMs} ms of running, waits excluded)` },
        };
      }
      if (outcome.reason === 'run-limit') {
        return {
          status: 'failed', result: full(c, partial(c, 'error')),
          error: {
            code: RUN_LIMIT_CODES.RUN_TIMEOUT,
            message: `the run was held by workers for MAX_RUN_MS (${c.deps.config.MAX_RUN_MS} ms) in all and was stopped`,
          },
        };
      }
      return { status: 'cancelled', result: full(c, partial(c, 'cancelled')) };
  }
}

/** The answer with what the attempt counted: its tool calls, the run's model usage. */
function full(c: Closing, answer: Answer): RunResult {
  return { ...answer, toolCallsSeen: answer.toolCallsSeen ?? c.progress?.toolCallsSeen ?? 0, ...usage(c) };
}

/** What an unfinished attempt produced: its streamed text, committed as incomplete. */
function partial(c: Closing, finishReason: string): RunResult {
  return { answer: c.progress?.emitted ?? '', finishReason, toolCallsSeen: c.progress?.toolCallsSeen ?? 0 };
}

/** Every model call counted for the run so far, earlier attempts included; none: absent. */
function usage(c: Closing): Pick<RunResult, 'usage'> {
  const u = c.progress?.usage ?? c.run.usage;
  return u && u.modelCalls > 0 ? { usage: { ...u } } : {};
}

/**
 * The closing of a broken attempt (something of Baton's threw on the way): the run fails
 * with CLOSE_FAILED, its streamed text as the answer. No turn is committed (the store may be
 * what threw) and nothing of the agent's result is written but that text, so this finish
 * cannot fail on the value that made the first one fail. If even this cannot be written, the
 * run is left to be taken over (bounded by MAX_RECOVERIES).
 */
async function closeBroken(c: Closing, why: string): Promise<AttemptOutcome> {
  const lastError: RunError = {
    code: RUN_LIMIT_CODES.CLOSE_FAILED,
    message: `the attempt could not be closed: ${why}`.slice(0, 2000),
  };
  c.log.error({ err: why }, 'closing the attempt failed; failing the run');
  // One try, no retries: a flush that fails here would leave a hole before `end`.
  const sent = await written(async () => {
    await c.writer.flush();
    return c.gateway.finish({
      status: 'failed', result: JSON.stringify({ ...partial(c, 'error'), ...usage(c) }), lastError: JSON.stringify(lastError),
    });
  });
  if (sent.ok) {
    c.trace?.closed('failed', { 'error.type': lastError.code });
    hook(c, () => c.deps.events?.finished?.(c.run, 'failed'));
  } else {
    c.trace?.closed('unclosed');
    if (sent.outcome.kind !== 'lease-lost') {
      c.log.error({ err: 'error' in sent.outcome ? sent.outcome.error : '' }, 'the run could not be failed either; it is taken over once its lease ends');
    }
  }
  return { kind: 'broken', error: why };
}

/**
 * A closing transition, its refusal or failure made an outcome where it happens: a lost lease
 * is its answer (`{ kind: 'lost' }`), Redis's loss or a bug what writeFailure makes of the error.
 */
async function written<T>(write: () => Promise<Fenced<T>>): Promise<Written<T>> {
  try {
    const sent = await write();
    return sent.kind === 'lost' ? { ok: false, outcome: { kind: 'lease-lost' } } : { ok: true, value: sent.value };
  } catch (err) {
    return { ok: false, outcome: writeFailure(err) };
  }
}

/** The attempt's events first, then the closing transition `write` (see flushBeforeClosing). */
async function flushThen<T>(c: Closing, write: () => Promise<Fenced<T>>): Promise<Written<T>> {
  const flushed = await flushBeforeClosing(c, () => c.writer.flush());
  return flushed.ok ? written(write) : flushed;
}

/**
 * The closing script carries the `end` event, so every event of the attempt must be in the
 * log before it runs: a token batch left behind is a hole in every client's answer (the
 * chaos soak caught one when Redis restarted during a finish). A failed write is retried
 * (the writer resends the same batch, applied once) for up to LEASE_MS; past that the lease
 * is as good as gone, and the error ends the attempt without closing it: the run is then
 * recovered and its next holder streams the answer again (events-unwritten).
 */
async function flushBeforeClosing<T>(c: Closing, write: () => Promise<T>): Promise<Written<T>> {
  const giveUpAt = Date.now() + c.deps.config.LEASE_MS;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
    try {
      return { ok: true, value: await write() };
    } catch (err) {
      if (err instanceof LeaseLostError) return { ok: false, outcome: { kind: 'lease-lost' } };
      if (Date.now() + delay > giveUpAt) return { ok: false, outcome: { kind: 'events-unwritten', error: errorText(err) } };
      c.log.warn({ err: errorText(err) }, 'could not write events before closing the run; trying again');
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

/**
 * The turn to commit: user message and answer together, or nothing when there is no
 * answer text (no dangling user message). Anything but a goal finish is marked incomplete.
 */
function turnMessages(
  run: RunRecord, result: RunResult, status: string, steered: readonly { content: string; after: number }[],
): SessionMessage[] {
  if (!result.answer) return [];
  const now = Date.now();
  const at = (role: SessionMessage['role'], content: string): SessionMessage => ({ role, content, runId: run.id, createdAt: now });
  const out: SessionMessage[] = [{ role: 'user', content: run.input.content, runId: run.id, createdAt: run.createdAt }];
  // Steering messages go where the run took them: after the answer's text streamed before
  // that boundary (the answer is that text, and createChatAgent's separator after it).
  let from = 0;
  for (const m of steered) {
    const upTo = Math.min(Math.max(m.after, from), result.answer.length);
    const before = result.answer.slice(from, upTo).trim();
    if (before) out.push(at('assistant', before));
    out.push(at('user', m.content));
    from = upTo;
  }
  const rest = result.answer.slice(from).trim();
  if (rest || from === 0) {
    const assistant = at('assistant', from === 0 ? result.answer : rest);
    if (status !== 'succeeded' || result.finishReason !== 'stop') assistant.incomplete = true;
    out.push(assistant);
  }
  return out;
}
