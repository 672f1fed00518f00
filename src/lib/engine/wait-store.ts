import type { Redis } from 'ioredis';
import type { WaitResumed } from '../contract/runs.ts';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import { OutputInvalidError } from '../sdk/errors.ts';
import type { RunRecord, StoredWait } from './record.ts';
import { processSchemaGuard, type SchemaGuard } from './schema-guard.ts';
import type { ResumedWait, Transitions } from './transitions.ts';
import { WaitTokens } from './wait-tokens.ts';

export interface WaitStoreEvents {
  /** This call resumed a wait (for the wait-duration histogram). */
  resumed?(wait: ResumedWait): void;
}

/**
 * Resuming waits, the API's half of them: with a key of the run's scope (by wait key), or
 * with the wait's resume token alone. Either way the value is checked against the wait's
 * JSON Schema first (in the schema guard's thread: the schema is the tenant's code), so a
 * refused value writes nothing, and then delivered by one transition (lua/resume.lua) that
 * succeeds once per wait.
 */
export class WaitStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly transitions: Transitions,
    /** Reads a run with its waits (RunStore.get), for the answer to a resume. */
    private readonly readRun: (scope: string, runId: string) => Promise<RunRecord | undefined>,
    private readonly schemaGuard: SchemaGuard = processSchemaGuard(),
    private readonly events: WaitStoreEvents = {},
  ) {}

  /**
   * Resumes wait `waitKey` of a run of `scope` with `value`; returns the run afterwards.
   * RUN_NOT_FOUND, WAIT_NOT_PENDING, VALIDATION_FAILED.
   */
  async resume(scope: string, runId: string, waitKey: string, value: unknown): Promise<RunRecord> {
    await this.deliver(scope, runId, waitKey, value, undefined, 'RUN_NOT_FOUND');
    const run = await this.readRun(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    return run;
  }

  /**
   * Resumes the wait a resume token opens. A token that opens nothing (made up, altered,
   * of a run past its retention) is NOT_FOUND, whatever scope it names; one whose wait was
   * resumed or timed out already is WAIT_NOT_PENDING.
   */
  async resumeWithToken(token: string, value: unknown): Promise<WaitResumed> {
    const parsed = WaitTokens.parse(token);
    if (!parsed) throw new BatonError('NOT_FOUND');
    const target = await this.redis.get(this.keys.scope(parsed.scope).waitToken(parsed.digest));
    if (!target) throw new BatonError('NOT_FOUND');
    const [runId, waitKey] = target.split(' ');
    await this.deliver(parsed.scope, runId, waitKey, value, parsed.digest, 'NOT_FOUND');
    return { runId, waitKey, resumed: true };
  }

  private async deliver(
    scope: string, runId: string, waitKey: string, value: unknown, tokenHash: string | undefined, missing: 'RUN_NOT_FOUND' | 'NOT_FOUND',
  ): Promise<void> {
    const sk = this.keys.scope(scope);
    const replies = await this.redis.multi().exists(sk.run(runId)).hget(sk.waits(runId), waitKey).exec();
    for (const [err] of replies ?? []) if (err) throw err;
    if (Number(replies?.[0]?.[1]) === 0) throw new BatonError(missing);
    const text = replies?.[1]?.[1] as string | null;
    if (!text) throw new BatonError('WAIT_NOT_PENDING');
    const wait = JSON.parse(text) as StoredWait;
    if (wait.kind === 'sleep') throw new BatonError('WAIT_NOT_PENDING', 'A sleep ends by itself; it cannot be resumed.');
    if (wait.schema !== undefined) await this.check(wait.schema, value, scope);
    const resumed = await this.transitions.resumeWait(scope, runId, waitKey, { value: JSON.stringify(value), tokenHash });
    this.events.resumed?.(resumed);
  }

  /** The value against the wait's schema: every problem is a VALIDATION_FAILED detail under body.value. */
  private async check(schema: Record<string, unknown>, value: unknown, scope: string): Promise<void> {
    try {
      await this.schemaGuard.validate(schema, value, undefined, scope);
    } catch (err) {
      if (!(err instanceof OutputInvalidError)) throw err;
      const details = (err.errors as { path?: string; message?: string }[]).map((p) => ({
        path: `body.value${p.path && p.path !== '/' ? p.path.replaceAll('/', '.') : ''}`,
        message: String(p.message ?? 'is invalid'),
      }));
      throw new BatonError('VALIDATION_FAILED', "The value does not match the wait's schema.", details);
    }
  }
}
