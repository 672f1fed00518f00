import type { ScriptCaller } from './caller.ts';
import { storeArtifact, type ArtifactReply } from './artifact.ts';
import { cancel, type CancelReply } from './cancel.ts';
import { deleteRun, type DeleteOutcome } from './delete.ts';
import { drain } from './drain.ts';
import { forkCopy, type ForkChunk } from './fork-copy.ts';
import { forkScan, type CallBudget } from './fork-scan.ts';
import { forkBegin, type ForkAt, type ForkBegun } from './fork.ts';
import { historyPage } from './history-page.ts';
import { chargeRead } from './read-cost.ts';
import { resolve, type Resolution } from './resolve.ts';
import { resumeWait, type ResumedWait } from './resume.ts';
import { submit, type NewRun, type SubmitLimit, type SubmitReply } from './submit.ts';
import { undrain } from './undrain.ts';

/**
 * The API side's transitions (routes, the submit door, the run store, waits, forks,
 * artifacts, read budgets). A submit's record names its scope; every other call is made in
 * one scope, `scope(name)`'s gateway. Each method is its unit (<name>.ts beside <name>.lua),
 * nothing more.
 */
export class ApiGateway {
  constructor(private readonly c: ScriptCaller) {}

  submit(r: NewRun): Promise<SubmitReply> { return submit(this.c, r); }
  /** The gateway of the scope `scope`: each call acts in it and in no other. */
  scope(scope: string): ScopeGateway { return new ScopeGateway(this.c, scope); }
}

/** The API's transitions in one scope. */
export class ScopeGateway {
  constructor(private readonly c: ScriptCaller, readonly scope: string) {}

  cancel(runId: string): Promise<CancelReply> { return cancel(this.c, this.scope, runId); }
  deleteRun(runId: string): Promise<DeleteOutcome> { return deleteRun(this.c, this.scope, runId); }
  resolve(runId: string, stepKey: string, resolution: Resolution): Promise<void> {
    return resolve(this.c, this.scope, runId, stepKey, resolution);
  }
  drain(runtime: string, o: { cancelQueued: boolean; batch: number }): Promise<{ cancelled: number; left: number }> {
    return drain(this.c, this.scope, runtime, o);
  }
  undrain(runtime: string, o: { first: boolean; batch: number }): Promise<{ resumed: number; left: number }> {
    return undrain(this.c, this.scope, runtime, o);
  }
  storeArtifact(
    a: { id: string; contentType: string; size: number; createdAt: number; bytes: Buffer }, o: { maxBytes: number; limit?: SubmitLimit },
  ): Promise<ArtifactReply> {
    return storeArtifact(this.c, this.scope, a, o);
  }
  chargeRead(bytes: number, limit: SubmitLimit): Promise<{ left: number; retryAfterMs: number }> {
    return chargeRead(this.c, this.scope, bytes, limit);
  }
  historyPage(sessionId: string, start: number, limit: number, maxBytes: number): Promise<{ messages: string[]; next?: number }> {
    return historyPage(this.c, this.scope, sessionId, start, limit, maxBytes);
  }
  forkScan(sessionId: string, start: number, budget: CallBudget): Promise<{ runIds: string[]; sizes: number[]; next?: number }> {
    return forkScan(this.c, this.scope, sessionId, start, budget);
  }
  forkBegin(from: string, to: string, at: ForkAt): Promise<ForkBegun> { return forkBegin(this.c, this.scope, from, to, at); }
  forkCopy(from: string, to: string, token: string, budget: CallBudget): Promise<ForkChunk> {
    return forkCopy(this.c, this.scope, from, to, token, budget);
  }
  resumeWait(runId: string, waitKey: string, o: { value: string; tokenHash?: string }): Promise<ResumedWait> {
    return resumeWait(this.c, this.scope, runId, waitKey, o);
  }
}
