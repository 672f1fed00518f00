import { AsyncLocalStorage } from 'node:async_hooks';
import type { WaitOptions } from '../sdk/agent.ts';
import { RUN_LIMIT_CODES } from '../contract/runs.ts';
import { BatonError } from '../errors.ts';
import { PermanentError, WaitTimeoutError } from '../sdk/errors.ts';
import type { WaitRequest } from '../transitions/wait.ts';
import type { AttemptOutcome } from './outcome.ts';
import { WaitTokens } from './waits/wait-tokens.ts';
import type { ContextDeps } from './context-deps.ts';

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

/** What AttemptWaits.ended resolves with: the run parks or blocks (AttemptWaits.stopped says which). */
export const STOPPED: unique symbol = Symbol('stopped');

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
export const MAX_WAIT_MS = 366 * 24 * 3600_000;

/** The step whose body runs in this async context: a wait cannot be awaited inside one. */
export const stepBody = new AsyncLocalStorage<string>();

/**
 * The run's waits and the verdict they lead to. A wait whose answer is in the memo returns it
 * at once; any other is recorded here and its promise stays pending. Once the agent waits on
 * waits only, `ended` resolves and the attempt's outcome is parked, with every wait recorded.
 * A non-idempotent step started by an earlier attempt with no result resolves `ended` too
 * (block): the outcome is blocked. "Only" is judged after a turn of the event loop with no
 * step in flight (begin/settled), so the waits of a Promise.all, and waits reached right
 * after a step that was still running, all make it into the one park.
 */
export class AttemptWaits {
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

  constructor(
    private readonly d: Pick<ContextDeps, 'attempt' | 'run' | 'schemaGuard' | 'maxWaits' | 'waitTokens'>,
    /** The run's memo (steps and waits answered), shared with its steps. */
    private readonly memo: ReadonlyMap<string, string>,
  ) {
    d.attempt.signal.addEventListener('abort', () => this.abandon(), { once: true });
  }

  /** Once `ended` resolved: the attempt's outcome, blocked (which wins) or parked. */
  stopped(): Extract<AttemptOutcome, { kind: 'blocked' | 'parked' }> | undefined {
    if (this.blockedOn !== undefined) return { kind: 'blocked', stepKey: this.blockedOn };
    if (this.isParked) return { kind: 'parked', waits: [...this.pending.values()].map((p) => p.request) };
    return undefined;
  }

  /** The run must block on `stepKey` (the first such step wins): `ended` resolves. */
  block(stepKey: string): void {
    this.blockedOn ??= stepKey;
    this.resolveEnded(STOPPED);
  }

  /** A step (or a check) is in flight until `settled`: the run does not park meanwhile. */
  begin(): void {
    this.busy++;
  }

  settled(): void {
    this.busy--;
    if (this.pending.size > 0) this.gate();
  }

  /** A wait: its answer from the memo, or recorded and pending until the attempt parks. */
  async wait<T>(request: WaitRequest): Promise<T> {
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
    this.begin();
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

  /** The attempt ended (parked, cancelled, lost...): what the agent still awaits is rejected, so it unwinds. */
  private abandon(): void {
    const reason = this.d.attempt.signal.reason as { reason?: string } | undefined;
    const err = reason?.reason === 'waiting' ? new RunWaiting([...this.pending.keys()]) : reason;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}

/** The parts of WaitOptions a wait records, checked. */
export function checkWaitOptions(key: string, o: WaitOptions): Pick<WaitRequest, 'prompt' | 'schema' | 'timeoutMs'> {
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

export function checkedPrompt(key: string, prompt: unknown): unknown {
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
