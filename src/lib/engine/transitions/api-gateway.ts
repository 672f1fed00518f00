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
 * artifacts, read budgets): each call names the scope it acts in. Each method is its unit
 * (<name>.ts beside <name>.lua), nothing more.
 */
export class ApiGateway {
  constructor(private readonly c: ScriptCaller) {}

  submit(r: NewRun): Promise<SubmitReply> { return submit(this.c, r); }
  cancel(scope: string, runId: string): Promise<CancelReply> { return cancel(this.c, scope, runId); }
  deleteRun(scope: string, runId: string): Promise<DeleteOutcome> { return deleteRun(this.c, scope, runId); }
  resolve(scope: string, runId: string, stepKey: string, resolution: Resolution): Promise<void> {
    return resolve(this.c, scope, runId, stepKey, resolution);
  }
  drain(scope: string, runtime: string, o: { cancelQueued: boolean; batch: number }): Promise<{ cancelled: number; left: number }> {
    return drain(this.c, scope, runtime, o);
  }
  undrain(scope: string, runtime: string, o: { first: boolean; batch: number }): Promise<{ resumed: number; left: number }> {
    return undrain(this.c, scope, runtime, o);
  }
  storeArtifact(
    scope: string, a: { id: string; contentType: string; size: number; createdAt: number; bytes: Buffer },
    o: { maxBytes: number; limit?: SubmitLimit },
  ): Promise<ArtifactReply> {
    return storeArtifact(this.c, scope, a, o);
  }
  chargeRead(scope: string, bytes: number, limit: SubmitLimit): Promise<{ left: number; retryAfterMs: number }> {
    return chargeRead(this.c, scope, bytes, limit);
  }
  historyPage(
    scope: string, sessionId: string, start: number, limit: number, maxBytes: number,
  ): Promise<{ messages: string[]; next?: number }> {
    return historyPage(this.c, scope, sessionId, start, limit, maxBytes);
  }
  forkScan(
    scope: string, sessionId: string, start: number, budget: CallBudget,
  ): Promise<{ runIds: string[]; sizes: number[]; next?: number }> {
    return forkScan(this.c, scope, sessionId, start, budget);
  }
  forkBegin(scope: string, from: string, to: string, at: ForkAt): Promise<ForkBegun> { return forkBegin(this.c, scope, from, to, at); }
  forkCopy(scope: string, from: string, to: string, token: string, budget: CallBudget): Promise<ForkChunk> {
    return forkCopy(this.c, scope, from, to, token, budget);
  }
  resumeWait(scope: string, runId: string, waitKey: string, o: { value: string; tokenHash?: string }): Promise<ResumedWait> {
    return resumeWait(this.c, scope, runId, waitKey, o);
  }
}
