import type { RunContext, SteeringMessage, WaitOptions } from '../sdk/agent.ts';
import { attachEventSink } from '../sdk/agent-reports.ts';
import type { ApprovalDecision, UsageTotals } from '../contract/runs.ts';
import { ToolDeclinedError } from '../sdk/errors.ts';
import { ID_PATTERN } from '../keys.ts';
import type { AttemptOutcome } from './outcome.ts';
import type { ContextDeps } from './context-deps.ts';
import { AgentStream } from './context-events.ts';
import { StepRunner } from './context-steps.ts';
import {
  APPROVAL_SCHEMA, AttemptWaits, checkedPrompt, checkWaitOptions, MAX_WAIT_MS, STOPPED,
} from './context-waits.ts';

export type { ContextDeps, MemoEvents } from './context-deps.ts';

/**
 * The agent's view of a run (ctx), made of one part per concern, all of this attempt:
 * - its steps (context-steps.ts): the memo behind ctx.step/infer/tool, token budgets, rate limits, usage;
 * - what it streams (context-events.ts): ctx.emit/emitData through the agent's `select`;
 * - its waits (context-waits.ts): ctx.waitFor/sleep/approvals, and the verdict parked or blocked;
 * - its steering (here): the messages taken at each boundary.
 */
export class ContextState {
  toolCallsSeen = 0;
  /** Steering messages taken in this attempt (earlier boundaries replayed included), each with the length of `emitted` then. */
  readonly steered: { id: string; content: string; after: number }[] = [];
  /** Boundaries this attempt reached (ctx.steering.take): the next one's number is this plus 1. */
  private boundaries = 0;
  /** The run's memo: step key -> stored JSON ({v, e?, startedAt?, finishedAt?}), waits' answers and start markers. */
  private readonly memo: Map<string, string>;
  private readonly stream: AgentStream;
  private readonly waits: AttemptWaits;
  private readonly steps: StepRunner;
  private readonly subagents = new Map<string, RunContext>();
  readonly ctx: RunContext;
  /** Resolves when the agent waits on waits and nothing else, or reached a step to block on (never otherwise). */
  readonly ended: Promise<typeof STOPPED>;

  constructor(private readonly d: ContextDeps) {
    this.memo = new Map(Object.entries(d.steps));
    this.stream = new AgentStream(d);
    this.waits = new AttemptWaits(d, this.memo);
    this.steps = new StepRunner(d, this.memo, this.waits, this.stream);
    this.ended = this.waits.ended;
    this.ctx = this.context(d.run.agent, '');
  }

  /** Selected non-ephemeral text emitted in this attempt (committed as an incomplete answer if the run ends early). */
  get emitted(): string {
    return this.stream.emitted;
  }

  /** The run's model usage: what earlier attempts stored (the claimed record) and what this one stored. */
  get usage(): UsageTotals {
    return this.steps.usage;
  }

  /** Once `ended` resolved: the attempt's outcome, blocked (which wins) or parked. */
  stopped(): Extract<AttemptOutcome, { kind: 'blocked' | 'parked' }> | undefined {
    return this.waits.stopped();
  }

  /** A context of `agent`, whose steps are named `<prefix><name>`. */
  private context(agent: string, prefix: string): RunContext {
    const { d, steps, stream } = this;
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
      emit: (text, options) => stream.emit(agent, text, options),
      emitData: (name, data, options) => stream.emitData(agent, name, data, options),
      step: (key, fn, options) => steps.memoized({ agent, kind: 'step', name: prefix + key, fn, idempotent: options?.idempotent ?? true }),
      infer: (name, fn, options) => steps.memoized({ agent, kind: 'infer', name: prefix + name, fn, idempotent: true, infer: options }),
      tool: (name, args, fn, options) => {
        const idempotent = options?.idempotent ?? true;
        if (!options?.approval) {
          this.toolCallsSeen++;
          return steps.memoized({ agent, kind: 'tool', name: prefix + name, fn: (call) => fn(args, call), idempotent, args });
        }
        // Both keys now, in call order: a concurrent call must not take this call's numbers.
        let waitKey: string;
        let toolKey: string;
        try {
          waitKey = steps.key('wait', prefix + name);
          toolKey = steps.key('tool', prefix + name);
        } catch (err) {
          return Promise.reject(err);
        }
        // Counted once approved (or run in an earlier attempt): a declined call never ran.
        const call = () => {
          this.toolCallsSeen++;
          return steps.run({ agent, kind: 'tool', key: toolKey, fn: (c) => fn(args, c), idempotent, args });
        };
        return this.approvedTool(prefix + name, waitKey, toolKey, call, args);
      },
      waitFor: <T>(name: string, options: WaitOptions = {}) => {
        try {
          const key = steps.key('wait', prefix + name);
          return this.waits.wait<T>({ key, kind: 'input', name: prefix + name, ...checkWaitOptions(key, options) });
        } catch (err) {
          return Promise.reject(err);
        }
      },
      sleep: (ms) => {
        try {
          const key = steps.key('wait', `${prefix}sleep`);
          if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_WAIT_MS) {
            throw new TypeError(`ctx.sleep(${String(ms)}): ms must be a number from 0 to ${MAX_WAIT_MS}`);
          }
          if (ms === 0) return Promise.resolve();
          return this.waits.wait<null>({ key, kind: 'sleep', name: `${prefix}sleep`, timeoutMs: Math.ceil(ms) }).then(() => undefined);
        } catch (err) {
          return Promise.reject(err);
        }
      },
      sleepUntil: (when) => {
        try {
          const key = steps.key('wait', `${prefix}sleep`);
          const untilMs = when instanceof Date ? when.getTime() : when;
          if (typeof untilMs !== 'number' || !Number.isFinite(untilMs)) throw new TypeError('ctx.sleepUntil needs a Date or epoch ms');
          if (untilMs <= Date.now() && !this.memo.has(key)) return Promise.resolve();
          return this.waits.wait<null>({ key, kind: 'sleep', name: `${prefix}sleep`, untilMs: Math.ceil(untilMs) }).then(() => undefined);
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
    attachEventSink(ctx, { publish: (e) => stream.publish(e), mcpCall: (n) => this.d.mcpCalled?.(n) });
    return ctx;
  }

  /**
   * A boundary of the run (ctx.steering.take): the messages pending now, or those an earlier
   * attempt took at this boundary (transitions/steer.lua). The events written before it go first, so a
   * reader sees each `steering` outcome after the text and tool results that came before it.
   */
  private async takeSteering(): Promise<SteeringMessage[]> {
    const { d } = this;
    if (d.attempt.signal.aborted) throw d.attempt.signal.reason;
    const boundary = ++this.boundaries;
    this.waits.begin();
    try {
      await d.writer.flush();
      const { taken, fresh } = await d.transitions.steer(d.run.sessionId, boundary);
      for (const m of taken) this.steered.push({ ...m, after: this.emitted.length });
      if (fresh && taken.length > 0) d.steered?.(taken.length);
      return taken;
    } finally {
      this.waits.settled();
    }
  }

  /** An approval-gated tool: the approval first (unless the call ran in an earlier attempt), then the memoized tool. */
  private async approvedTool<T>(name: string, waitKey: string, toolKey: string, call: () => Promise<T>, args: unknown): Promise<T> {
    if (!this.memo.has(toolKey)) {
      const decision = await this.waits.wait<ApprovalDecision>({
        key: waitKey, kind: 'approval', name, prompt: checkedPrompt(waitKey, args), schema: APPROVAL_SCHEMA,
      });
      if (!decision?.approved) throw new ToolDeclinedError(name, decision?.reason);
    }
    return call();
  }
}
