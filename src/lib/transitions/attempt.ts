import type { ScopeKeys } from '../keys.ts';

/**
 * Why an attempt's signal was aborted. `timeout`: the run's timeoutMs ran out; `run-limit`:
 * workers held it for MAX_RUN_MS in all; `waiting` and `blocked`: the attempt ended parked or
 * blocked, so the agent's code left behind must stop.
 */
export type AbortReason = 'cancelled' | 'lease-lost' | 'shutdown' | 'timeout' | 'run-limit' | 'waiting' | 'blocked';

export class RunAbort extends Error {
  constructor(readonly reason: AbortReason) {
    super(`run aborted: ${reason}`);
    this.name = 'AbortError';
  }
}

/** What an attempt is about: fixed at the claim, read by everything that writes for it. */
export interface AttemptOf {
  id: string;
  scope: string;
  sessionId: string;
  runtime: string;
}

/**
 * One attempt of one run, as this worker holds it: the run's keys, the fence its claim got
 * and the signal that stops it. The lease keeper, the event writer, the run context and
 * the closing transitions all take this value, so "who writes for which run under which
 * fence" is decided once, at the claim.
 */
export class Attempt {
  readonly scope: string;
  readonly runId: string;
  readonly sessionId: string;
  readonly runtime: string;
  readonly keys: ScopeKeys;
  /** The run record's key. */
  readonly runKey: string;
  private readonly controller = new AbortController();

  constructor(run: AttemptOf, readonly fence: number, keys: ScopeKeys) {
    this.scope = run.scope;
    this.runId = run.id;
    this.sessionId = run.sessionId;
    this.runtime = run.runtime;
    this.keys = keys;
    this.runKey = keys.run(run.id);
  }

  /** Aborted on cancel, lease loss, shutdown, timeout, park and block; `reason` is a RunAbort saying which. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  abort(reason: AbortReason): void {
    this.controller.abort(new RunAbort(reason));
  }
}
