/**
 * Baton's OpenTelemetry spans, on `@opentelemetry/api` alone: without a registered SDK every
 * call here is the API's no-op (no span is made, nothing is exported, nothing is written to
 * Redis). `baton start|api|worker` register one when OTEL_* asks for it (src/cli/tracing.ts);
 * an application embedding Baton registers its own. docs/tracing.md has the tree and the
 * attributes.
 *
 * One run is one trace: the submit's span context is stored with the run (its `traceparent`
 * field), and every attempt, on whichever worker, is a child of it, as is each wait, recorded
 * by the process that ended it. A child rather than a link: a trace backend shows one tree
 * per trace, so a run read as one trace shows its retries, recoveries and waits on one time
 * axis; linked traces are shown one at a time. The caller's own trace is where the run's
 * trace begins only when the operator trusts its callers (BATON_TRACE_CALLER=parent); by
 * default the submit links to it, since a tenant writes its `traceparent` as it likes.
 *
 * No attribute holds the run's input, a model's output, a tool's arguments or a wait's value
 * unless `content` (BATON_TRACE_CONTENT) is on.
 */
import {
  context, propagation, ProxyTracerProvider, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace,
  type Attributes, type Context, type Link, type Span, type SpanContext,
} from '@opentelemetry/api';
import type { WaitKind } from '../contract/runs.ts';

const TRACER_NAME = 'baton-agents';

/** The longest content attribute kept (BATON_TRACE_CONTENT): a tool may take a whole document. */
export const CONTENT_MAX_CHARS = 4096;

const tracer = () => trace.getTracer(TRACER_NAME);

/** What the API's global provider delegates to when no SDK registered one. */
const NOOP_PROVIDER = new ProxyTracerProvider().getDelegate();

/**
 * Whether a tracer provider is registered: spans would be made. Work done only for a span
 * (a Redis read of a run's trace context) is skipped when not.
 */
export function tracingEnabled(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider && provider.getDelegate() === NOOP_PROVIDER);
}

// ---- W3C trace context, stored with the run ----

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A span's context as a W3C `traceparent` value; undefined when it has none (no SDK, no caller's). */
export function traceparentOf(span: Span): string | undefined {
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return undefined;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The context whose parent is a stored `traceparent`; the root context when there is none (or it is malformed). */
export function contextOf(traceparent: string | undefined): Context {
  const m = traceparent === undefined ? null : TRACEPARENT.exec(traceparent);
  if (!m) return ROOT_CONTEXT;
  const sc: SpanContext = { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), isRemote: true };
  return trace.isSpanContextValid(sc) ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

/** `trace_id` and `span_id` of a span, for a logger's bindings; none without a valid span context. */
export function logFieldsOf(span: Span): { trace_id?: string; span_id?: string } {
  const sc = span.spanContext();
  return trace.isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : {};
}

/** A content attribute's value: text as it is, anything else as JSON, cut at CONTENT_MAX_CHARS. */
export function contentValue(value: unknown): string {
  let text: string;
  try {
    text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    text = '[not JSON]';
  }
  return text.length > CONTENT_MAX_CHARS ? `${text.slice(0, CONTENT_MAX_CHARS)}…` : text;
}

/**
 * A thrown value on a span: its code (a BatonError's, a Node error's) or name as `error.type`,
 * status ERROR. Not its message, which may quote what it failed on (a tool's arguments, a
 * model's answer); the run's `lastError` and the log have it.
 */
export function recordError(span: Span, err: unknown): void {
  const e = err as { code?: unknown; name?: unknown } | undefined;
  const type = typeof e?.code === 'string' ? e.code : typeof e?.name === 'string' && e.name ? e.name : 'Error';
  span.setAttribute('error.type', type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
}

// ---- the submit (API) ----

/** Request headers as Node gives them: the carrier a caller's `traceparent` comes in. */
export type HeaderCarrier = Record<string, string | string[] | undefined>;

/** What a caller's `traceparent` makes of a submit's span (BATON_TRACE_CALLER): a link from a trace of its own, or its parent. */
export type TraceCaller = 'link' | 'parent';

/**
 * Where a submit's span goes: under the span active in the process (an embedding
 * application's HTTP server span: the application decided what to trust), else by the
 * caller's `traceparent` header (through the registered propagator): as its parent when
 * `caller` is `parent`; with `link`, in a new trace whose root links to the caller's span,
 * so a tenant that names a trace id (another tenant's) adds nothing to that trace.
 */
function submitPlacement(headers: HeaderCarrier | undefined, caller: TraceCaller): { parent: Context; links?: Link[] } {
  const active = context.active();
  if (trace.getSpan(active) !== undefined || headers === undefined) return { parent: active };
  const extracted = propagation.extract(active, headers);
  if (caller === 'parent') return { parent: extracted };
  const sc = trace.getSpanContext(extracted);
  const links = sc && trace.isSpanContextValid(sc) ? [{ context: sc, attributes: { 'baton.link': 'caller' } }] : undefined;
  return { parent: ROOT_CONTEXT, links };
}

export interface SubmitSpanOf {
  scope: string;
  sessionId: string;
  runtime: string;
  agent: string;
  input: { content: string };
}

export interface SubmitTracing {
  /** BATON_TRACE_CONTENT: the input's text as an attribute. */
  content: boolean;
  /** BATON_TRACE_CALLER. */
  caller: TraceCaller;
}

/**
 * The `baton.submit` span, started before the submit transition: `traceparent` is what the run
 * stores (undefined: nothing to store); `made` or `failed` says how it ended, `end` closes it.
 */
export class SubmitTrace {
  private readonly span: Span;
  readonly traceparent: string | undefined;

  constructor(req: SubmitSpanOf, headers: HeaderCarrier | undefined, o: SubmitTracing) {
    const attributes: Attributes = {
      'baton.scope': req.scope, 'baton.session.id': req.sessionId, 'baton.runtime': req.runtime, 'baton.agent': req.agent,
    };
    if (o.content) attributes['baton.input.content'] = contentValue(req.input.content);
    const { parent, links } = submitPlacement(headers, o.caller);
    this.span = tracer().startSpan('baton.submit', { kind: SpanKind.PRODUCER, attributes, ...(links ? { links } : {}) }, parent);
    this.traceparent = traceparentOf(this.span);
  }

  made(run: { id: string; status: string }, created: boolean): void {
    this.span.setAttributes({ 'baton.run.id': run.id, 'baton.run.created': created, 'baton.run.status': run.status });
  }

  failed(err: unknown): void {
    recordError(this.span, err);
  }

  end(): void {
    this.span.end();
  }
}

// ---- waits (whichever process ends them) ----

export interface EndedWait {
  key?: string;
  kind: WaitKind;
  /** When the run first reached the wait (epoch ms, Redis time): the span's start. */
  since: number;
}

/** How a wait stopped pending, as the metrics name it. */
export type WaitEnd = 'resumed' | 'timed_out' | 'slept';

/** The end of a wait that passed its deadline: a sleep's or a budget wait's is its time, any other's a timeout. */
export const expiredWaitEnd = (kind: WaitKind): WaitEnd => (kind === 'sleep' || kind === 'budget' ? 'slept' : 'timed_out');

/**
 * `baton.wait` for each wait that stopped pending, recorded when it stopped (by the API that
 * resumed it, the sweeper that timed it out, the worker whose park found it over): from the
 * moment the run reached it to now, a child of the run's stored trace context. A run with
 * no stored context (submitted untraced) gets no wait span.
 */
export function traceWaitsEnded(
  traceparent: string | undefined, runId: string, waits: readonly EndedWait[], end: (w: EndedWait) => WaitEnd, now = Date.now(),
): void {
  const parent = contextOf(traceparent);
  if (parent === ROOT_CONTEXT) return;
  for (const w of waits) {
    const attributes: Attributes = { 'baton.run.id': runId, 'baton.wait.kind': w.kind, 'baton.wait.outcome': end(w) };
    if (w.key !== undefined) attributes['baton.wait.key'] = w.key;
    const span = tracer().startSpan('baton.wait', { startTime: Math.min(w.since, now), attributes }, parent);
    span.end(now);
  }
}

// ---- an attempt (worker) ----

/** How an attempt ended, as its span's `baton.attempt.outcome` says. */
export type AttemptEnd =
  | 'succeeded' | 'failed' | 'cancelled' | 'retrying' | 'waiting' | 'blocked' | 'handed-over'
  /** Another worker holds the run now: this attempt's writes stopped landing. */
  | 'lease-lost'
  /** Redis out of reach or the events unwritable: the run is taken over once its lease ends. */
  | 'unclosed';

export interface AttemptSpanOf {
  id: string;
  scope: string;
  sessionId: string;
  runtime: string;
  agent: string;
  attempt: number;
  maxAttempts: number;
  traceparent?: string;
}

export type StepKind = 'step' | 'infer' | 'tool';

/** One model call of an inference, as the step recorded it. */
export interface TracedModelCall {
  model: string;
  inputTokens: number;
  outputTokens: number;
}

/**
 * One attempt's spans: `baton.attempt`, a child of the run's stored trace context, and its
 * children (steps, the finish). Made at the claim, ended once when the attempt is over.
 */
export class AttemptTrace {
  private readonly span: Span;
  /** The attempt span's context: the parent of its steps and its finish. */
  readonly context: Context;
  private outcome: AttemptEnd | undefined;

  /** `content`: BATON_TRACE_CONTENT, read by the steps (a model's output, a tool's arguments). */
  constructor(run: AttemptSpanOf, o: { recovered: boolean; fence: number; workerId: string }, readonly content: boolean) {
    this.span = tracer().startSpan('baton.attempt', {
      kind: SpanKind.CONSUMER,
      attributes: {
        'baton.run.id': run.id, 'baton.scope': run.scope, 'baton.session.id': run.sessionId, 'baton.runtime': run.runtime,
        'baton.agent': run.agent, 'baton.attempt.number': run.attempt, 'baton.attempt.max': run.maxAttempts,
        'baton.attempt.recovered': o.recovered, 'baton.attempt.fence': o.fence, 'baton.worker.id': o.workerId,
      },
    }, contextOf(run.traceparent));
    this.context = trace.setSpan(ROOT_CONTEXT, this.span);
  }

  /** For the run's logger: its lines carry the trace and this attempt's span. */
  logFields(): { trace_id?: string; span_id?: string } {
    return logFieldsOf(this.span);
  }

  /** `fn` with the attempt's span active: what the agent's code starts (its steps, an SDK's own spans) nests under it. */
  within<T>(fn: () => T): T {
    return context.with(this.context, fn);
  }

  /** The attempt's closing: the first call says how it ended (a closing that turns into another is told once). */
  closed(outcome: AttemptEnd, attributes: Attributes = {}): void {
    if (this.outcome !== undefined) return;
    this.outcome = outcome;
    this.span.setAttributes({ ...attributes, 'baton.attempt.outcome': outcome });
    if (outcome === 'failed' || outcome === 'unclosed') this.span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
  }

  /** Ends the attempt's span (once the attempt let go of the run). */
  end(): void {
    this.span.end();
  }

  /**
   * A step's span: a child of the active span when it belongs to this attempt (a step inside
   * another step's body), else of the attempt. A memo hit is a span too, ended at once.
   */
  step(kind: StepKind, key: string, o: { idempotent: boolean; memoHit: boolean }): StepTrace {
    const active = context.active();
    const parent = trace.getSpanContext(active)?.traceId === this.span.spanContext().traceId ? active : this.context;
    const span = tracer().startSpan(`baton.${kind}`, {
      attributes: { 'baton.step.key': key, 'baton.step.kind': kind, 'baton.step.memo_hit': o.memoHit, 'baton.step.idempotent': o.idempotent },
    }, parent);
    return new StepTrace(span, kind, trace.setSpan(parent, span), this.content);
  }

  /**
   * Starts `baton.finish`, a child of the attempt's span: the run's end with its history commit
   * (the finish transition, which writes the built-in store's turn); its caller ends it.
   */
  finishing(): FinishTrace {
    return new FinishTrace(tracer().startSpan('baton.finish', {}, this.context));
  }

}

/** The finish's span, told what the finish wrote once it landed. */
export class FinishTrace {
  constructor(private readonly span: Span) {}

  /** `historyMessages`: the turn's messages committed (0: none, the answer was empty); `store`: where. */
  committed(o: { status: string; finishReason: string; historyMessages: number; store: 'redis' | 'custom' | 'none' }): void {
    this.span.setAttributes({
      'baton.run.status': o.status, 'baton.result.finish_reason': o.finishReason,
      'baton.history.messages': o.historyMessages, 'baton.history.store': o.store,
    });
  }

  /** The finish was not written: `why` (the attempt's outcome instead, e.g. lease-lost) is the span's error.type. */
  notWritten(why: string): void {
    recordError(this.span, { name: why });
  }

  /** Something of Baton's threw on the way (the attempt closes broken). */
  failed(err: unknown): void {
    recordError(this.span, err);
  }

  end(): void {
    this.span.end();
  }
}

/** One step's span, ended by its step. */
export class StepTrace {
  constructor(
    private readonly span: Span, private readonly kind: StepKind, private readonly context: Context, private readonly content: boolean,
  ) {}

  /** `fn` (the step's body) with this step's span active. */
  within<T>(fn: () => T): T {
    return context.with(this.context, fn);
  }

  /** The run blocks on this step: a non-idempotent step an earlier attempt started and left without a result. */
  blocked(): void {
    this.span.setAttribute('baton.step.blocked', true);
  }

  /** A tool's arguments, kept only when content is traced. */
  toolArguments(args: unknown): void {
    if (this.content && args !== undefined) this.span.setAttribute('baton.tool.arguments', contentValue(args));
  }

  /**
   * What an inference's body did: the model calls it recorded, as OpenTelemetry's GenAI
   * attributes (the model asked for, tokens summed over the calls), and, when content is
   * traced, the text it streamed.
   */
  inferred(calls: readonly TracedModelCall[], provider: string | undefined, streamed: string | undefined): void {
    if (this.kind !== 'infer') return;
    const attributes: Attributes = { 'gen_ai.operation.name': 'chat' };
    const last = calls.at(-1);
    if (last && last.model !== 'unknown') attributes['gen_ai.request.model'] = last.model;
    if (calls.length) {
      attributes['gen_ai.usage.input_tokens'] = calls.reduce((n, c) => n + c.inputTokens, 0);
      attributes['gen_ai.usage.output_tokens'] = calls.reduce((n, c) => n + c.outputTokens, 0);
      attributes['baton.infer.model_calls'] = calls.length;
    }
    if (provider) {
      attributes['gen_ai.provider.name'] = provider;
      // The attribute's name before semantic conventions 1.37, which many backends still read.
      attributes['gen_ai.system'] = provider;
    }
    if (this.content && streamed) attributes['baton.infer.output'] = contentValue(streamed);
    this.span.setAttributes(attributes);
  }

  failed(err: unknown): void {
    recordError(this.span, err);
  }

  end(): void {
    this.span.end();
  }
}
