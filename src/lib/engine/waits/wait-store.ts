import type { Redis } from 'ioredis';
import type { WaitResumed } from '../../contract/runs.ts';
import { BatonError } from '../../errors.ts';
import type { Keys } from '../../keys.ts';
import { OutputInvalidError } from '../../sdk/errors.ts';
import type { RunRecord, StoredWait } from '../../transitions/record.ts';
import { processSchemaGuard, type SchemaGuard } from '../schema/schema-guard.ts';
import type { ResumedWait } from '../../transitions/resume.ts';
import type { ApiGateway } from '../../transitions/api-gateway.ts';
import { WaitTokens } from './wait-tokens.ts';
import { traceWaitsEnded, tracingEnabled } from '../../tracing/tracing.ts';

/** The wait a resume token opens: found before the resume's body is read. */
export interface OpenedWait { scope: string; runId: string; waitKey: string; digest: string }

export interface WaitStoreEvents {
  /** This call resumed a wait (for the wait-duration histogram). */
  resumed?(wait: ResumedWait): void;
}

/**
 * Resuming waits, the API's half of them: with a key of the run's scope (by wait key), or
 * with the wait's resume token alone. Either way the value is checked against the wait's
 * JSON Schema first (in the schema guard's thread: the schema is the tenant's code), so a
 * refused value writes nothing, and then delivered by one transition (transitions/resume.lua) that
 * succeeds once per wait. The check counts against the run's scope (SCHEMA_CHECKS_PER_SCOPE),
 * by token too, and is dropped when `signal` (the HTTP request's) aborts before it ran.
 *
 * A token stays valid while its wait pends, whatever happens to the key that submitted the
 * run: it was made for the wait, not handed out by a key (docs/waits-and-approvals.md).
 */
export class WaitStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly transitions: ApiGateway,
    /** Reads a run with its waits (RunStore.get), for the answer to a resume. */
    private readonly readRun: (scope: string, runId: string) => Promise<RunRecord | undefined>,
    private readonly schemaGuard: SchemaGuard = processSchemaGuard(),
    private readonly events: WaitStoreEvents = {},
  ) {}

  /**
   * Resumes wait `waitKey` of a run of `scope` with `value`; returns the run afterwards.
   * RUN_NOT_FOUND, WAIT_NOT_PENDING, VALIDATION_FAILED.
   */
  async resume(scope: string, runId: string, waitKey: string, value: unknown, signal?: AbortSignal): Promise<RunRecord> {
    await this.deliver(scope, runId, waitKey, value, undefined, 'RUN_NOT_FOUND', signal);
    const run = await this.readRun(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND');
    return run;
  }

  /**
   * The wait a resume token opens. A token that opens nothing (made up, altered, of a run
   * past its retention) is NOT_FOUND, whatever scope it names.
   */
  async open(token: string): Promise<OpenedWait> {
    const parsed = WaitTokens.parse(token);
    if (!parsed) throw new BatonError('NOT_FOUND');
    const target = await this.redis.get(this.keys.scope(parsed.scope).waitToken(parsed.digest));
    if (!target) throw new BatonError('NOT_FOUND');
    const [runId, waitKey] = target.split(' ');
    return { scope: parsed.scope, runId, waitKey, digest: parsed.digest };
  }

  /** Resumes a wait open() found; one resumed or timed out meanwhile is WAIT_NOT_PENDING. */
  async resumeOpened(wait: OpenedWait, value: unknown, signal?: AbortSignal): Promise<WaitResumed> {
    await this.deliver(wait.scope, wait.runId, wait.waitKey, value, wait.digest, 'NOT_FOUND', signal);
    return { runId: wait.runId, waitKey: wait.waitKey, resumed: true };
  }

  /** open() and resumeOpened() in one. */
  async resumeWithToken(token: string, value: unknown, signal?: AbortSignal): Promise<WaitResumed> {
    return this.resumeOpened(await this.open(token), value, signal);
  }

  private async deliver(
    scope: string, runId: string, waitKey: string, value: unknown, tokenHash: string | undefined, missing: 'RUN_NOT_FOUND' | 'NOT_FOUND',
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const sk = this.keys.scope(scope);
    const read = this.redis.multi().exists(sk.run(runId)).hget(sk.waits(runId), waitKey);
    // The run's trace context, for the wait's span, in the same round trip (only when traced).
    const replies = await (tracingEnabled() ? read.hget(sk.run(runId), 'traceparent') : read).exec();
    for (const [err] of replies ?? []) if (err) throw err;
    if (Number(replies?.[0]?.[1]) === 0) throw new BatonError(missing);
    const text = replies?.[1]?.[1] as string | null;
    if (!text) throw new BatonError('WAIT_NOT_PENDING');
    const wait = JSON.parse(text) as StoredWait;
    if (wait.kind === 'sleep') throw new BatonError('WAIT_NOT_PENDING', 'A sleep ends by itself; it cannot be resumed.');
    if (wait.kind === 'budget') {
      throw new BatonError('WAIT_NOT_PENDING', "A wait for the scope's token budget ends with the UTC day; it cannot be resumed.");
    }
    if (wait.schema !== undefined) await this.check(wait.schema, value, scope, waitKey, signal);
    const resumed = await this.transitions.scope(scope).resumeWait(runId, waitKey, { value: JSON.stringify(value), tokenHash });
    traceWaitsEnded(replies?.[2]?.[1] as string | undefined, runId, [{ key: waitKey, kind: resumed.kind, since: resumed.since }], () => 'resumed');
    this.events.resumed?.(resumed);
  }

  /** The value against the wait's schema: every problem is a VALIDATION_FAILED detail under body.value. */
  private async check(
    schema: Record<string, unknown>, value: unknown, scope: string, waitKey: string, signal?: AbortSignal,
  ): Promise<void> {
    try {
      await this.schemaGuard.validate(schema, value, undefined, scope, { bounded: true, signal, label: `the schema of ${waitKey}` });
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
