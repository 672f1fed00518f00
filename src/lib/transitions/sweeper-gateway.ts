import type { RunRecord } from './record.ts';
import type { ScriptCaller } from './caller.ts';
import { runDue } from './due.ts';
import { expire } from './expire.ts';
import { fill } from './fill.ts';
import type { AnsweredWait } from './reply.ts';
import { repair } from './repair.ts';
import { trimStorage } from './storage.ts';
import { timeOut } from './timeout.ts';
import { unserved } from './unserved.ts';
import { waitTimeout } from './wait-timeout.ts';

/** The sweeper's transitions (engine/sweeper.ts): deadlines passed, slots filled, storage trimmed, leases repaired. */
export class SweeperGateway {
  constructor(private readonly c: ScriptCaller) {}

  waitTimeout(scope: string, runId: string): Promise<{ answered: AnsweredWait[]; runtime: string; agent: string }> {
    return waitTimeout(this.c, scope, runId);
  }
  runDue(scope: string, runId: string): Promise<boolean> { return runDue(this.c, scope, runId); }
  fill(scope: string): Promise<boolean> { return fill(this.c, scope); }
  trimStorage(scope: string): Promise<{ stored: number; more: boolean }> { return trimStorage(this.c, scope); }
  expire(scope: string, runId: string): Promise<RunRecord | undefined> { return expire(this.c, scope, runId); }
  timeOut(scope: string, runId: string): Promise<RunRecord | undefined> { return timeOut(this.c, scope, runId); }
  unserved(scope: string, runId: string, dispatch: number, message: string): Promise<RunRecord | undefined> {
    return unserved(this.c, scope, runId, dispatch, message);
  }
  repair(scope: string, runId: string, job?: { dispatch: number; alive: boolean }): Promise<boolean> {
    return repair(this.c, scope, runId, job);
  }
}
