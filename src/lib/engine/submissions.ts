import type { ArtifactStore } from '../artifacts/artifact-store.ts';
import { assertAttachmentsExist } from '../artifacts/resolve.ts';
import type { Config } from '../config/index.ts';
import type { MintedStreamToken, StreamTokenStore } from '../tenancy/stream-tokens.ts';
import { quoteList, type WorkerRegistry } from './flow/worker-registry.ts';
import { BatonError } from '../errors.ts';
import { assertValidOutputSchema } from './schema/output-schema.ts';
import type { SchemaGuard } from './schema/schema-guard.ts';
import type { RerunPlan, RunStore, SubmitRequest, SubmitResult } from './store.ts';
import type { SubmitLimit } from './transitions.ts';
import { traceSubmit, type HeaderCarrier } from '../tracing/tracing.ts';

export interface SubmissionDeps {
  config: Config;
  store: RunStore;
  artifacts: ArtifactStore;
  registry: WorkerRegistry;
  streamTokens: StreamTokenStore;
  schemaGuard: SchemaGuard;
  /** The scope's submit rate limit (undefined: off), taken by the submit script. */
  limit: SubmitLimit | undefined;
}

export interface SubmitOptions<A> {
  /** The request's: a submit whose client left has its output schema not checked at all. */
  signal?: AbortSignal;
  /**
   * Called after every check that can refuse the submit and before the run is made, its
   * value returned as `admitted`: the API admits the submit's event stream here, so a stream
   * over its caps makes no run.
   */
  admit?(): A;
  /** Mint a stream token for the run, on behalf of this key (not counted against the mint rate). */
  streamTokenFor?: string;
  /** The request's headers: a caller's `traceparent` there is linked from the submit's span, or its parent (BATON_TRACE_CALLER). */
  traceHeaders?: HeaderCarrier;
  /** A re-run: the run it repeats and the steps it starts with (reruns.ts). */
  rerun?: RerunPlan;
}

export interface Submission<A> extends SubmitResult {
  /** What the caller should know: no live worker serves the run's agent yet (registry). */
  warnings: string[];
  streamToken?: MintedStreamToken;
  admitted?: A;
}

/**
 * A client's submit as the API takes it, in one call: the output schema checked (once, off
 * the event loop), the attached artifacts found, the agent looked up in the registry (refused
 * when the runtime never offered it: assertAwaited), then the run made (RunStore.create,
 * with the scope's rate limit, its first status event carrying the registry's warnings) and,
 * when asked, a stream token minted for it.
 */
export class Submissions {
  constructor(private readonly d: SubmissionDeps) {}

  async submit<A = never>(req: SubmitRequest, o: SubmitOptions<A> = {}): Promise<Submission<A>> {
    const { d } = this;
    if (req.outputSchema !== undefined) await assertValidOutputSchema(req.outputSchema, d.schemaGuard, req.scope, o.signal);
    await assertAttachmentsExist(d.artifacts, req.scope, req.input.artifacts, d.config.ARTIFACT_INLINE_MAX_BYTES);
    const { warnings, unknown } = await d.registry.admission(req.runtime, req.agent, d.config.AGENT_GRACE_MS);
    if (unknown) await this.assertAwaited(req, unknown);
    const admitted = o.admit?.();
    // The rate limit is taken in the submit itself, after every check that can refuse it:
    // bad input, a refused submit or a replay spends no token (lua/submit.lua). The run keeps
    // the submit's trace context, which its attempts continue.
    const rerun = o.rerun ? { rerun: o.rerun } : {};
    const tracing = { content: d.config.BATON_TRACE_CONTENT, caller: d.config.BATON_TRACE_CALLER };
    const { run, created, steering } = await traceSubmit(
      req, o.traceHeaders, tracing, (traceparent) => d.store.create(req, { limit: d.limit, traceparent, warnings, ...rerun }),
    );
    // A page that shows the answer gets its token with the run: no second request before it can stream.
    const streamToken = o.streamTokenFor === undefined
      ? undefined
      : await d.streamTokens.mint(req.scope, { runId: run.id }, o.streamTokenFor, { limited: false });
    return {
      run, created, warnings, ...(steering ? { steering } : {}), ...(streamToken ? { streamToken } : {}), ...(admitted ? { admitted } : {}),
    };
  }

  /**
   * A submit for an agent its runtime's workers never offered in the last day is a typo more
   * often than an agent on its way: refused at once with 422 UNKNOWN_AGENT (nothing written,
   * no rate-limit token spent), so a chat page shows the mistake instead of waiting
   * AGENT_GRACE_MS for the run to fail. It queues when the caller says it will deploy the
   * agent (`awaitAgent: true`), when the operator set UNKNOWN_AGENT_SUBMIT=queue, and for a
   * retry of a submit whose idempotency key made a run already (it answers that run, as before).
   */
  private async assertAwaited(req: SubmitRequest, known: string[]): Promise<void> {
    const { d } = this;
    if (req.awaitAgent === true || d.config.UNKNOWN_AGENT_SUBMIT === 'queue') return;
    if (req.idempotencyKey !== undefined && await d.store.idempotencyKeyUsed(req.scope, req.idempotencyKey)) return;
    throw new BatonError(
      'UNKNOWN_AGENT',
      `No worker of runtime "${req.runtime}" offered agent "${req.agent}" in the last day; its agents: ${quoteList(known)}. ` +
        'Send "awaitAgent": true to queue the run until a worker with it starts.',
      [{ path: 'body.agent', message: `runtime "${req.runtime}" has no agent "${req.agent}"; it has ${quoteList(known)}` }],
    );
  }
}
