import { BatonError } from '../../errors.ts';
import type { RunRecord } from '../../transitions/record.ts';
import type { StepMark } from '../step-list.ts';
import type { RerunPlan, SubmitRequest } from '../submissions.ts';
import { TERMINAL_STATUSES, type RerunRequest } from '../../contract/runs.ts';

const FINISHED: ReadonlySet<string> = new Set(TERMINAL_STATUSES);

/**
 * Plans a re-run of `run` from `fromStep` (absent: from the start). The steps that started
 * before fromStep (all of them, for the step that failed a run: it stored nothing) and ended
 * keep their results (copied, so they are not run again); from fromStep on everything runs.
 * A step declared non-idempotent that is not copied may have had its effect already, whether
 * it ended or not, so it is listed; the re-run needs `allowNonIdempotent` to run it again
 * (RERUN_NON_IDEMPOTENT names each otherwise).
 */
export function planRerun(run: RunRecord, steps: StepMark[], body: Pick<RerunRequest, 'fromStep' | 'allowNonIdempotent'>): RerunPlan {
  if (!FINISHED.has(run.status)) {
    throw new BatonError('RUN_NOT_FINISHED', undefined, [{ path: 'runId', message: `the run is ${run.status}` }]);
  }
  let from = 0;
  if (body.fromStep !== undefined) {
    from = steps.findIndex((s) => s.key === body.fromStep);
    // The step that failed a run stored nothing (an idempotent step leaves no trace until its
    // result): in a run that did not succeed, a step it holds no record of comes after every
    // step it does. A succeeded run ran every step it has.
    if (from < 0 && run.status !== 'succeeded') from = steps.length;
    if (from < 0) throw new BatonError('STEP_NOT_FOUND', undefined, [{ path: 'body.fromStep', message: `the run has no step ${body.fromStep}` }]);
  }
  const kept = steps.slice(0, from).filter((s) => s.done);
  const copySteps = kept.flatMap((s) => (s.nonIdempotent ? [s.key, `${s.key}#started`] : [s.key]));
  const keptKeys = new Set(kept.map((s) => s.key));
  const nonIdempotent = steps.filter((s) => s.nonIdempotent && !keptKeys.has(s.key)).map((s) => s.key);
  if (nonIdempotent.length && body.allowNonIdempotent !== true) {
    throw new BatonError('RERUN_NON_IDEMPOTENT', undefined, nonIdempotent.map((key) => ({
      path: 'body.allowNonIdempotent',
      message: `${key} is non-idempotent and ${steps.find((s) => s.key === key)?.done ? 'completed' : 'started'} in run ${run.id}: the re-run would run it again`,
    })));
  }
  return { of: run.id, ...(body.fromStep !== undefined ? { fromStep: body.fromStep } : {}), copySteps, nonIdempotent };
}

/**
 * The submit a re-run makes: the run's session, runtime, agent, input and options, with the
 * request's overrides. Not its idempotency key (that would answer with the run itself) nor
 * its schedule: a re-run is due now, behind whatever its session holds.
 */
export function rerunSubmit(scope: string, run: RunRecord, body: RerunRequest): SubmitRequest {
  const maxAttemptsSet = (run as RunRecord & { maxAttemptsSet?: string }).maxAttemptsSet === '1';
  const maxAttempts = body.maxAttempts ?? (maxAttemptsSet ? run.maxAttempts : undefined);
  const memory = body.memory !== undefined ? body.memory : run.memory;
  const req: SubmitRequest = {
    scope, sessionId: run.sessionId, runtime: run.runtime, agent: run.agent,
    input: body.input ?? run.input, multitask: 'enqueue',
  };
  const optional = {
    metadata: body.metadata ?? run.metadata, memory, outputSchema: run.outputSchema, maxAttempts,
    timeoutMs: body.timeoutMs ?? run.timeoutMs, ttlMs: run.ttlMs, priority: body.priority ?? run.priority,
    concurrencyKey: run.concurrencyKey, onBudget: run.onBudget, idempotencyKey: body.idempotencyKey,
    awaitAgent: body.awaitAgent,
  };
  for (const [k, v] of Object.entries(optional)) if (v !== undefined) (req as Record<string, unknown>)[k] = v;
  return req;
}
