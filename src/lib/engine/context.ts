import type { Agent, EmitOptions, HistoryMessage, InferCall, ModelCallUsage, RunContext, StepOptions } from '../sdk/agent.ts';
import { attachEventSink } from '../sdk/agent-reports.ts';
import { DEFAULT_SELECT, type AgentEvent, type EventPredicate } from '../sdk/select.ts';
import type { UsageTotals } from '../contract/runs.ts';
import type { EventWriter } from '../streams/writer.ts';
import type { Logger } from '../logger.ts';
import type { Attempt } from './attempt.ts';
import type { RunRecord } from './record.ts';
import type { Transitions } from './transitions.ts';
import type { AgentInput } from '../artifacts/artifact-store.ts';
import type { MemoryBlocks } from '../sessions/memory-blocks.ts';
import { ID_PATTERN } from '../keys.ts';

/** Thrown inside the agent when a run had to be blocked; the executor stops the attempt quietly. */
export class RunBlocked extends Error {
  constructor(readonly stepKey: string) {
    super(`run blocked on step ${stepKey}`);
    this.name = 'RunBlocked';
  }
}

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
  /** Model calls of a step whose result this attempt stored: counted now, once (metrics). */
  usageCounted?(agent: string, calls: readonly ModelCallUsage[]): void;
  /** Blocks the run (fenced); called when a non-idempotent step was started and never finished. */
  block(stepKey: string): Promise<void>;
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
 */
export class ContextState {
  /** Selected non-ephemeral text emitted in this attempt (committed as an incomplete answer if the run ends early). */
  emitted = '';
  toolCallsSeen = 0;
  /** The run's model usage: what earlier attempts stored (the claimed record) and what this one stored. */
  readonly usage: UsageTotals;
  private readonly memo: Map<string, string>;
  private readonly seq = new Map<string, number>();
  /** Text of running inferences, per agent: what a memo hit replays. */
  private readonly captures = new Set<{ agent: string; text: string }>();
  private readonly select: EventPredicate;
  private readonly subagents = new Map<string, RunContext>();
  readonly ctx: RunContext;

  constructor(private readonly d: ContextDeps) {
    this.memo = new Map(Object.entries(d.steps));
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
      step: (key, fn, options) => this.memoized(agent, 'step', prefix + key, fn, options?.idempotent ?? true),
      infer: (name, fn) => this.memoized(agent, 'infer', prefix + name, fn, true),
      tool: (name, args, fn, options) => {
        this.toolCallsSeen++;
        return this.memoized(agent, 'tool', prefix + name, (call) => fn(args, call), options?.idempotent ?? true);
      },
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
    attachEventSink(ctx, { publish: (e) => this.publish(e) });
    return ctx;
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

  private async memoized<T>(
    agent: string, kind: 'step' | 'infer' | 'tool', name: string, fn: (call: InferCall) => Promise<T> | T, idempotent: boolean,
  ): Promise<T> {
    const key = this.stepKey(kind, name);
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
    if (!idempotent) {
      if (this.memo.has(`${key}#started`)) {
        await this.d.block(key);
        throw new RunBlocked(key);
      }
      await this.d.transitions.step(this.d.attempt, { op: 'start', stepKey: key });
      this.memo.set(`${key}#started`, String(Date.now()));
    }
    const capture = kind === 'infer' ? { agent, text: '' } : undefined;
    if (capture) this.captures.add(capture);
    const calls: Required<ModelCallUsage>[] = [];
    let open = true;
    const recordUsage = (u: ModelCallUsage) => {
      // Usage reported after the step was written can be counted nowhere. A warning, not an
      // error: a late callback (a stream's onFinish) throwing would crash the worker, not the run.
      if (!open) return void this.d.log.warn({ stepKey: key }, 'usage recorded after its step finished is not counted');
      calls.push(modelCall(u));
    };
    let value: T;
    // The step's times ride along with its result (the inspector shows them): no extra round trip.
    const startedAt = Date.now();
    try {
      value = await fn({ idempotencyKey: `${this.d.run.id}:${key}`, signal: this.d.attempt.signal, recordUsage });
    } finally {
      open = false;
      if (capture) this.captures.delete(capture);
    }
    const finishedAt = Date.now();
    const json = JSON.stringify(
      capture?.text ? { v: value ?? null, e: capture.text, startedAt, finishedAt } : { v: value ?? null, startedAt, finishedAt },
    );
    // The usage goes with the result in one fenced script, which counts it only if it stores the result.
    const usage = calls.length ? { agent, at: finishedAt, calls } : undefined;
    const kept = await this.d.transitions.step(this.d.attempt, { op: 'done', stepKey: key, result: json, usage });
    this.memo.set(key, kept);
    if (usage && kept === json) this.counted(agent, calls);
    return (JSON.parse(kept) as { v: T }).v;
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

/** A model call as the scripts count it: a bounded model id, whole non-negative token counts. */
function modelCall(u: ModelCallUsage): Required<ModelCallUsage> {
  // Capped well below what Lua prints as an integer (14 digits): no provider call comes near it.
  const tokens = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n > 0 ? Math.min(Math.round(n), 1e12) : 0);
  const model = typeof u?.model === 'string' && u.model.trim() ? u.model.trim().slice(0, MODEL_ID_MAX) : 'unknown';
  return { model, inputTokens: tokens(u?.inputTokens), outputTokens: tokens(u?.outputTokens) };
}
