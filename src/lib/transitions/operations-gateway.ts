import { cancelOperation } from './bulk-cancel.ts';
import { claimBatch } from './bulk-claim.ts';
import { commitBatch, type BatchCommit } from './bulk-commit.ts';
import { createOperation } from './bulk-create.ts';
import type { ScriptCaller } from './caller.ts';
import { claimTick, type TickClaim } from './schedule-claim.ts';
import { tickDone, type TickOutcome } from './schedule-done.ts';
import { pauseSchedule } from './schedule-pause.ts';
import { resumeSchedule } from './schedule-resume.ts';

/** Cron schedules' transitions (src/lib/schedules): pause, resume, a due tick's claim and its done mark. */
export class ScheduleGateway {
  constructor(private readonly c: ScriptCaller) {}

  pauseSchedule(scope: string, id: string): Promise<'paused' | 'not-found'> { return pauseSchedule(this.c, scope, id); }
  resumeSchedule(scope: string, id: string, nextAt: number | undefined): Promise<'active' | 'not-found'> {
    return resumeSchedule(this.c, scope, id, nextAt);
  }
  claimTick(scope: string, id: string, t: TickClaim): Promise<boolean> { return claimTick(this.c, scope, id, t); }
  tickDone(scope: string, id: string, tick: number, outcome: TickOutcome): Promise<boolean> {
    return tickDone(this.c, scope, id, tick, outcome);
  }
}

/** Bulk operations' transitions (bulk-operations.ts): an operation made and stopped, its batches claimed and counted. */
export class BulkGateway {
  constructor(private readonly c: ScriptCaller) {}

  createOperation(scope: string, id: string, fields: Record<string, string>, o: { maxRunning: number; now: number }): Promise<'created' | 'at-cap'> {
    return createOperation(this.c, scope, id, fields, o);
  }
  cancelOperation(scope: string, id: string, o: { now: number; retentionMs: number }): Promise<'stopped' | 'not-found'> {
    return cancelOperation(this.c, scope, id, o);
  }
  claimBatch(scope: string, id: string, o: { token: string; now: number; leaseMs: number }): Promise<string | undefined> {
    return claimBatch(this.c, scope, id, o);
  }
  commitBatch(scope: string, id: string, b: BatchCommit): Promise<boolean> { return commitBatch(this.c, scope, id, b); }
}
