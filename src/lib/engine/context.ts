import type { Agent, EmitOptions, HistoryMessage, RunContext, StepCall, StepOptions } from '../sdk/agent.ts';
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
  /** Blocks the run (fenced); called when a non-idempotent step was started and never finished. */
  block(stepKey: string): Promise<void>;
}

/**
 * The agent's view of a run, and the memo behind ctx.step/infer/tool. Memo lookups are
 * local (the steps hash came with the claim); only a miss costs a round trip (two for a
 * non-idempotent step: its start marker, then its result).
 */
export class ContextState {
  /** Non-ephemeral text emitted in this attempt (committed as an incomplete answer if the run ends early). */
  emitted = '';
  toolCallsSeen = 0;
  private readonly memo: Map<string, string>;
  private readonly seq = new Map<string, number>();
  private readonly captures = new Set<{ text: string }>();
  readonly ctx: RunContext;

  constructor(private readonly d: ContextDeps) {
    this.memo = new Map(Object.entries(d.steps));
    const run = d.run;
    this.ctx = {
      runId: run.id,
      scope: run.scope,
      sessionId: run.sessionId,
      runtime: run.runtime,
      agent: run.agent,
      attempt: run.attempt,
      maxAttempts: run.maxAttempts,
      input: d.input,
      metadata: run.metadata ?? {},
      memory: run.memory,
      history: d.history,
      memoryBlocks: d.memoryBlocks,
      signal: d.attempt.signal,
      log: d.log,
      emit: (text, options) => this.emit(text, options),
      step: (key, fn, options) => this.memoized('step', key, fn, options?.idempotent ?? true),
      infer: (name, fn) => this.memoized('infer', name, fn, true),
      tool: (name, args, fn, options) => {
        this.toolCallsSeen++;
        return this.memoized('tool', name, (call) => fn(args, call), options?.idempotent ?? true);
      },
    };
  }

  private emit(text: string, options?: EmitOptions): void {
    if (typeof text !== 'string' || text === '' || this.d.attempt.signal.aborted) return;
    if (options?.ephemeral) {
      this.d.writer.event('ephemeral', { text });
      return;
    }
    this.emitted += text;
    for (const c of this.captures) c.text += text;
    this.d.writer.token(text);
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
    kind: 'step' | 'infer' | 'tool', name: string, fn: (call: StepCall) => Promise<T> | T, idempotent: boolean,
  ): Promise<T> {
    const key = this.stepKey(kind, name);
    const stored = this.memo.get(key);
    if (stored !== undefined) {
      this.d.memo?.hit(kind);
      const { v, e } = JSON.parse(stored) as { v: T; e?: string };
      // The text an inference streamed is part of this attempt's answer: replay it.
      if (e) this.emit(e);
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
    const capture = kind === 'infer' ? { text: '' } : undefined;
    if (capture) this.captures.add(capture);
    let value: T;
    // The step's times ride along with its result (the inspector shows them): no extra round trip.
    const startedAt = Date.now();
    try {
      value = await fn({ idempotencyKey: `${this.d.run.id}:${key}`, signal: this.d.attempt.signal });
    } finally {
      if (capture) this.captures.delete(capture);
    }
    const finishedAt = Date.now();
    const json = JSON.stringify(
      capture?.text ? { v: value ?? null, e: capture.text, startedAt, finishedAt } : { v: value ?? null, startedAt, finishedAt },
    );
    const kept = await this.d.transitions.step(this.d.attempt, { op: 'done', stepKey: key, result: json });
    this.memo.set(key, kept);
    return (JSON.parse(kept) as { v: T }).v;
  }
}
