/**
 * `baton/ai`: Vercel AI SDK code made durable with one wrapper per model and one per tool set.
 *
 *   const model = durableModel(ctx, openai.chat('gpt-4o-mini'));
 *   const tools = durableTools(ctx, { weather }, { charge: { idempotent: false } });
 *   const result = streamText({ model, tools, stopWhen: stepCountIs(5), messages, abortSignal: ctx.signal });
 *
 * Every generateText/streamText call made with the wrapped model is a memoized `ctx.infer`
 * step: its stored value is the whole provider response (text, tool calls, finish reason,
 * usage), its text deltas stream to the run's readers through ctx.emit, and a memo hit
 * (a retry, a recovery after a crash) replays both the response and the text without
 * calling the provider. Every wrapped tool's `execute` is a memoized `ctx.tool` step.
 *
 * Supported: AI SDK 6 (`ai` 6.x, language model specification v3), the major that runs on
 * Node 20; AI SDK 7 needs Node 22.
 */
import type {
  LanguageModelV3, LanguageModelV3CallOptions, LanguageModelV3Content, LanguageModelV3GenerateResult, LanguageModelV3Prompt,
  LanguageModelV3StreamPart, LanguageModelV3StreamResult, LanguageModelV3Usage,
} from '@ai-sdk/provider';
import { APICallError, wrapLanguageModel, type LanguageModelMiddleware, type ModelMessage, type ToolSet } from 'ai';
import type { InferOptions, RateLimitRequest, RunContext } from './agent.ts';
import { BUCKET_NAME } from '../config/rate-limits.ts';
import { recordModelCall, reportModelCall, reportToolCall, reportToolResult, type ModelUsage } from './agent-reports.ts';
import { isPermanentError, isToolDeclinedError, isTransientError, TransientError } from './errors.ts';
import { estimateCallTokens } from './token-estimate.ts';
import { heldToolFailure, holdToolFailure } from './tool-failures.ts';
import { classify } from './retry-policy.ts';
import { ID_PATTERN } from '../keys.ts';

export interface DurableModelOptions {
  /**
   * The step name: calls are `infer:<name>:<n>`, n counting this name's calls in the run,
   * so the Nth call of any attempt gets the same key. Default `model`. Give models that are
   * called concurrently (Promise.all over two agents) names of their own, so each one's
   * calls are numbered in an order that does not depend on timing.
   */
  name?: string;
  /**
   * The provider rate-limit bucket (RATE_LIMITS) each call takes a grant from first.
   * Default: `<provider>:<model id>` (`openai:gpt-4o-mini` for `openai.chat('gpt-4o-mini')`)
   * when RATE_LIMITS defines it, no bucket otherwise; a name: that bucket, which RATE_LIMITS
   * must define; false: none. The reservation is the call's estimate (its prompt, plus
   * `maxOutputTokens` when the call sets one), settled with the usage the provider reports.
   */
  rateLimit?: string | false;
}

/**
 * A language model whose every call (generate or stream) is a memoized step of the run.
 *
 * Retries are Baton's: provider errors are rethrown in Baton's terms (HTTP status kept, so
 * 408/425/429/5xx are retried with the provider's Retry-After, others fail the run), which
 * also keeps the AI SDK from retrying the call inside the attempt under a new step key.
 * The run's signal is joined to the call's abort signal, so a cancel stops the request.
 */
export function durableModel(ctx: RunContext, model: LanguageModelV3, options: DurableModelOptions = {}): LanguageModelV3 {
  const name = options.name ?? 'model';
  if (!ID_PATTERN.test(name)) throw new TypeError(`durableModel name ${JSON.stringify(name)} must match ${ID_PATTERN}`);
  const rateLimit = modelRateLimit(model, options.rateLimit);
  const steered = steeringInPrompt(ctx);
  const middleware: LanguageModelMiddleware = {
    specificationVersion: 'v3',
    transformParams: async ({ params }) => steered(withRunSignal(ctx, params)),
    wrapGenerate: async ({ doGenerate, params, model: inner }) => {
      endIfToolFailed(ctx);
      let called = false;
      const stored = await ctx.infer(name, async (call): Promise<StoredGenerate> => {
        called = true;
        const result = await providerCall(ctx, doGenerate);
        for (const part of result.content) if (part.type === 'text' && part.text) ctx.emit(part.text);
        recordModelCall(call, inner.modelId, toUsage(result.usage), providerOf(inner));
        return storeGenerate(result);
      }, { estimatedTokens: callEstimate(params), rateLimit });
      reportModelCall(ctx, { model: inner.modelId, usage: toUsage(stored.usage), replayed: !called });
      return reviveGenerate(stored);
    },
    wrapStream: async ({ doStream, params, model: inner }) => memoizedStream(ctx, name, inner, doStream, {
      estimatedTokens: callEstimate(params), rateLimit,
    }),
  };
  return wrapLanguageModel({ model, middleware });
}

export interface DurableToolOptions {
  /**
   * false: a crash between the tool's start and its stored result blocks the run for an
   * operator instead of running it again. Default true.
   */
  idempotent?: boolean;
  /**
   * true: each call waits for a person to allow it before `execute` runs, as a Baton wait of
   * kind `approval` (prompt: the input; the run holds no worker meanwhile). The AI SDK's own
   * `needsApproval` on the tool means the same (a function is asked per call and must answer
   * the same for the same input, since the run re-executes). A decline reaches the model as
   * the tool's error, with the reason given; the loop goes on.
   */
  approval?: boolean;
}

/**
 * The same tools, each `execute` run as a memoized `ctx.tool` step named after the tool
 * (`tool:<name>:<n>`). Tools without `execute` pass through unchanged.
 *
 * Errors: the AI SDK hands whatever a tool throws to the model as a tool error. An ordinary
 * error is stored as the step's outcome, so a retry replays the same error instead of
 * running the tool again behind the model's back. An error that steers the run
 * (TransientError, RetryAfterError, PermanentError, or one Baton classifies as transient,
 * such as a 429 or a network error) is not stored: the wrapped model's next call throws it,
 * ending the attempt the way the error asks (the tool runs again on the retry). If no model
 * call follows (the loop's step limit was reached), it stays a tool error in the result.
 */
export function durableTools<T extends ToolSet>(
  ctx: RunContext, tools: T, options: { [K in keyof T]?: DurableToolOptions } = {},
): T {
  const out: Record<string, unknown> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const opts = (options as Record<string, DurableToolOptions | undefined>)[name] ?? {};
    const where = `durableTools: tool ${JSON.stringify(name)}`;
    // The name becomes part of the tool's step key, so it obeys the step name pattern.
    if (!ID_PATTERN.test(name)) throw new TypeError(`${where}: the name must match ${ID_PATTERN}`);
    // The approval is Baton's (a durable wait), so the AI SDK must not run its own, which would
    // end the loop and hand the decision back to the caller of streamText.
    const { needsApproval, ...rest } = tool;
    const execute = tool.execute;
    if (!execute) {
      if (opts.approval || needsApproval) throw new TypeError(`${where}: a tool without execute cannot wait for approval`);
      out[name] = tool;
      continue;
    }
    out[name] = {
      ...rest,
      execute: async (input: unknown, call: ApprovalCall) => {
        reportToolCall(ctx, { callId: call.toolCallId, name, args: input });
        const approval = opts.approval === true || (typeof needsApproval === 'function'
          ? await needsApproval(input as never, {
            toolCallId: call.toolCallId, messages: call.messages ?? [], experimental_context: call.experimental_context,
          })
          : needsApproval === true);
        let ran = false;
        const outcome = await ctx.tool(name, input, async (args, step) => {
          ran = true;
          const abortSignal = call.abortSignal ? AbortSignal.any([call.abortSignal, step.signal]) : step.signal;
          try {
            return await lastValue(execute.call(tool, args as never, { ...call, abortSignal } as never));
          } catch (err) {
            // An abort is no outcome of the tool: the call did not finish, nothing is stored.
            if (abortSignal.aborted) throw err;
            if (steersRun(err)) {
              holdToolFailure(ctx, err);
              // Not stored and not the model's to see, but readers learn why the attempt ends.
              reportToolResult(ctx, { callId: call.toolCallId, name, ok: false, error: describe(err), replayed: false });
              throw err;
            }
            return { [FAILED]: err instanceof Error ? err.message : String(err) };
          }
        }, { idempotent: opts.idempotent ?? true, approval }).catch((err: unknown) => {
          // Declined: the tool did not run; the AI SDK gives the model this error as the tool's answer.
          if (isToolDeclinedError(err)) {
            reportToolResult(ctx, { callId: call.toolCallId, name, ok: false, error: err.message, replayed: false, declined: true });
          }
          throw err;
        });
        if (isFailure(outcome)) {
          reportToolResult(ctx, { callId: call.toolCallId, name, ok: false, error: outcome[FAILED], replayed: !ran });
          throw new Error(outcome[FAILED]);
        }
        reportToolResult(ctx, { callId: call.toolCallId, name, ok: true, result: outcome, replayed: !ran });
        return outcome;
      },
    };
  }
  return out as T;
}

/** What the AI SDK passes a tool's execute besides the input (the parts this wrapper reads). */
interface ApprovalCall {
  toolCallId: string;
  abortSignal?: AbortSignal;
  messages?: ModelMessage[];
  experimental_context?: unknown;
}

// ---- Tool outcomes ----

/** Marks a stored tool outcome that was an error (what the model was told). */
const FAILED = '$batonToolError';

function isFailure(v: unknown): v is { [FAILED]: string } {
  return typeof v === 'object' && v !== null && typeof (v as Record<string, unknown>)[FAILED] === 'string' && Object.keys(v).length === 1;
}

function endIfToolFailed(ctx: RunContext): void {
  const held = heldToolFailure(ctx);
  if (held) throw held.err;
}

function steersRun(err: unknown): boolean {
  return isTransientError(err) || isPermanentError(err) || classify(err).kind === 'transient';
}

/** A tool may stream preliminary results (an async iterable): the last one is its result. */
async function lastValue(v: unknown): Promise<unknown> {
  if (v && typeof v === 'object' && Symbol.asyncIterator in v && !(v instanceof Promise)) {
    let last: unknown;
    for await (const item of v as AsyncIterable<unknown>) last = item;
    return last;
  }
  return v;
}

// ---- Model calls ----

/**
 * Steering messages (ctx.steering, docs/steering.md) for one durable model: taken before each of
 * its calls but the first (the boundary after a step and its tool calls), as user messages at the
 * end of that call's prompt, and kept where they were taken in every later call's prompt (the
 * AI SDK's loop builds each prompt from its own messages, which do not hold them). The model is
 * one conversation: a model used for two unrelated conversations in one run would place them wrong.
 */
function steeringInPrompt(ctx: RunContext): (params: LanguageModelV3CallOptions) => Promise<LanguageModelV3CallOptions> {
  let calls = 0;
  const taken: { at: number; messages: LanguageModelV3Prompt }[] = [];
  return async (params) => {
    if (calls++ > 0) {
      const got = await ctx.steering.take();
      if (got.length > 0) taken.push({ at: params.prompt.length, messages: got.map((m) => userPart(m.content)) });
    }
    if (taken.length === 0) return params;
    const prompt = [...params.prompt];
    let shift = 0;
    for (const t of taken) {
      if (t.at > params.prompt.length) break;
      prompt.splice(t.at + shift, 0, ...t.messages);
      shift += t.messages.length;
    }
    return { ...params, prompt };
  };
}

const userPart = (text: string): LanguageModelV3Prompt[number] => ({ role: 'user', content: [{ type: 'text', text }] });

/**
 * After a generateText/streamText loop with a durable model: the steering messages sent since
 * its last model call, as user messages to go on with (`[...messages, ...response.messages,
 * ...more]` into another call); none: the turn is over. A loop whose model finished its answer
 * calls no model again by itself; this is its boundary (without it, such a message becomes the
 * session's next turn when the run ends).
 */
export async function steeringMessages(ctx: RunContext): Promise<ModelMessage[]> {
  return (await ctx.steering.take()).map((m) => ({ role: 'user', content: m.content }));
}

function withRunSignal(ctx: RunContext, params: LanguageModelV3CallOptions): LanguageModelV3CallOptions {
  const abortSignal = params.abortSignal ? AbortSignal.any([params.abortSignal, ctx.signal]) : ctx.signal;
  return { ...params, abortSignal };
}

/** Who serves a model: the AI SDK's provider id without its API (`openai.chat` is `openai`). */
function providerOf(model: Pick<LanguageModelV3, 'provider'>): string {
  return String(model.provider).split('.')[0];
}

/**
 * The bucket a durable model's calls take grants from: the one named, none (false), or by
 * default `<provider>:<model id>` if RATE_LIMITS defines it (a pair no bucket name can hold has none).
 */
function modelRateLimit(model: LanguageModelV3, option: string | false | undefined): RateLimitRequest | undefined {
  if (option === false) return undefined;
  if (option === undefined) {
    const key = `${providerOf(model)}:${model.modelId}`;
    return BUCKET_NAME.test(key) ? { key, optional: true } : undefined;
  }
  if (typeof option !== 'string' || !BUCKET_NAME.test(option)) {
    throw new TypeError(`durableModel: rateLimit must be false or a bucket name matching ${BUCKET_NAME.source}`);
  }
  return { key: option };
}

/** The call's tokens as the scope's daily token budget checks them: the prompt, and the most output it asks for. */
function callEstimate(params: LanguageModelV3CallOptions): number {
  return estimateCallTokens({ prompt: params.prompt, tools: params.tools }, params.maxOutputTokens);
}

/**
 * Runs a provider call, rethrowing its errors in Baton's terms. They must stop being
 * APICallErrors: the AI SDK retries those within the attempt, and a retried call would take
 * the next step key, so the Nth call of an attempt would no longer be the Nth of the next.
 */
async function providerCall<T>(ctx: RunContext, call: () => PromiseLike<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    const mapped = providerError(err);
    if (!ctx.signal.aborted) ctx.emit(`[model error: ${errorCode(mapped)}]`, { ephemeral: true });
    throw mapped;
  }
}

/** An HTTP answer from the provider: the retry policy reads `status` and `headers` (Retry-After). */
class ProviderError extends Error {
  constructor(message: string, readonly status: number, readonly headers: Record<string, string>, options: { cause: unknown }) {
    super(message, options);
    this.name = 'ProviderError';
  }
}

function providerError(err: unknown): unknown {
  if (!APICallError.isInstance(err)) return err;
  if (typeof err.statusCode === 'number') return new ProviderError(err.message, err.statusCode, err.responseHeaders ?? {}, { cause: err });
  return new TransientError(`the model endpoint is unreachable: ${err.message}`, 'PROVIDER_UNREACHABLE', { cause: err });
}

function errorCode(err: unknown): string {
  if (err instanceof ProviderError) return `HTTP ${err.status}`;
  return (err as { code?: unknown })?.code ? String((err as { code: unknown }).code) : 'error';
}

function toUsage(u: LanguageModelV3Usage | undefined): ModelUsage | undefined {
  const input = u?.inputTokens?.total;
  const output = u?.outputTokens?.total;
  if (input === undefined && output === undefined) return undefined;
  return { inputTokens: input ?? 0, outputTokens: output ?? 0, totalTokens: (input ?? 0) + (output ?? 0) };
}

// ---- generate: what is stored ----

/**
 * The stored form of a generate result: JSON only. Request and response bodies and headers
 * are left out (they can be large and are only diagnostics); dates become ISO strings and
 * binary file data base64, both of which the specification allows or revives.
 */
interface StoredGenerate {
  content: LanguageModelV3Content[];
  finishReason: LanguageModelV3GenerateResult['finishReason'];
  usage: LanguageModelV3Usage;
  providerMetadata?: LanguageModelV3GenerateResult['providerMetadata'];
  warnings: LanguageModelV3GenerateResult['warnings'];
  response?: { id?: string; modelId?: string; timestamp?: string };
}

function storeGenerate(r: LanguageModelV3GenerateResult): StoredGenerate {
  return {
    content: r.content.map((part) => (part.type === 'file' ? { ...part, data: base64(part.data) } : part)),
    finishReason: r.finishReason,
    usage: r.usage,
    providerMetadata: r.providerMetadata,
    warnings: r.warnings,
    response: r.response && { id: r.response.id, modelId: r.response.modelId, timestamp: r.response.timestamp?.toISOString() },
  };
}

function reviveGenerate(s: StoredGenerate): LanguageModelV3GenerateResult {
  const { response, ...rest } = s;
  return { ...rest, response: response && { ...response, timestamp: response.timestamp ? new Date(response.timestamp) : undefined } };
}

const base64 = (data: string | Uint8Array) => (typeof data === 'string' ? data : Buffer.from(data).toString('base64'));

// ---- stream: live or replayed ----

type StoredPart = Exclude<LanguageModelV3StreamPart, { type: 'response-metadata' }> | { type: 'response-metadata'; id?: string; modelId?: string; timestamp?: string };

/**
 * A streamed call inside ctx.infer. The returned stream is fed live while the provider
 * answers (text deltas also go to ctx.emit), and the step stores the parts, compacted, once
 * the stream finished; on a memo hit it is fed from the stored parts at once, and the
 * engine replays the text to readers.
 *
 * Every failure (the provider's 429, a cut, a tool's TransientError waiting for this call)
 * errors the stream instead of rejecting the call: streamText turns a rejected call into an
 * error part and goes on (its text then resolves to what earlier steps said, and the run
 * would succeed on a partial answer), while an errored stream rejects its result with the
 * error itself, which the agent's `await result.text` rethrows and the retry policy reads.
 */
function memoizedStream(
  ctx: RunContext, name: string, model: Pick<LanguageModelV3, 'modelId' | 'provider'>, doStream: () => PromiseLike<LanguageModelV3StreamResult>,
  infer: InferOptions,
): LanguageModelV3StreamResult {
  const { modelId } = model;
  let out!: ReadableStreamDefaultController<LanguageModelV3StreamPart>;
  let cancelled = false;
  const stream = new ReadableStream<LanguageModelV3StreamPart>({
    start(c) { out = c; },
    // The reader gave up; the provider's stream is still read to the end so the step is stored.
    cancel() { cancelled = true; },
  });
  const push = (part: LanguageModelV3StreamPart) => {
    if (!cancelled) out.enqueue(part);
  };
  let called = false;
  const held = heldToolFailure(ctx);
  const step = held
    ? Promise.reject(held.err)
    : ctx.infer(name, async (call): Promise<{ parts: StoredPart[] }> => {
      called = true;
      const live = await providerCall(ctx, doStream);
      const parts = await relay(ctx, live.stream, push);
      const finish = parts.find((p) => p.type === 'finish');
      recordModelCall(call, modelId, toUsage(finish?.type === 'finish' ? finish.usage : undefined), providerOf(model));
      return { parts };
    }, infer);
  step.then(
    ({ parts }) => {
      if (!called) for (const p of parts) push(revivePart(p));
      const finish = parts.find((p) => p.type === 'finish');
      reportModelCall(ctx, { model: modelId, usage: toUsage(finish?.type === 'finish' ? finish.usage : undefined), replayed: !called });
      if (!cancelled) out.close();
    },
    (err) => {
      if (!cancelled) out.error(err);
    },
  );
  return { stream };
}

/** Reads the provider's stream to its end, passing parts on live; returns them compacted for the memo. */
async function relay(
  ctx: RunContext, source: ReadableStream<LanguageModelV3StreamPart>, push: (p: LanguageModelV3StreamPart) => void,
): Promise<StoredPart[]> {
  const parts: StoredPart[] = [];
  let chars = 0;
  try {
    for await (const part of source as unknown as AsyncIterable<LanguageModelV3StreamPart>) {
      if (part.type === 'error') {
        // A failure the provider reported inside the stream: nothing of it may be stored.
        throw new TransientError(`the model stream reported an error: ${describe(part.error)}`, 'PROVIDER_STREAM_ERROR', { cause: part.error });
      }
      if (part.type === 'text-delta' && part.delta) {
        chars += part.delta.length;
        ctx.emit(part.delta);
      }
      push(part);
      compactInto(parts, part);
    }
  } catch (err) {
    if (ctx.signal.aborted || isTransientError(err)) throw err;
    throw new TransientError(`the model stream broke after ${chars} characters: ${describe(err)}`, 'STREAM_CUT', { cause: err });
  }
  // A stream that ends without its finish part was cut, even when the connection closed cleanly.
  if (!parts.some((p) => p.type === 'finish')) throw new TransientError(`the model stream ended unfinished after ${chars} characters`, 'STREAM_CUT');
  return parts;
}

/** Appends `part` for storage: consecutive deltas of one text, reasoning or tool input become one; raw chunks are dropped. */
function compactInto(parts: StoredPart[], part: LanguageModelV3StreamPart): void {
  if (part.type === 'raw') return;
  const last = parts.at(-1);
  if ((part.type === 'text-delta' || part.type === 'reasoning-delta' || part.type === 'tool-input-delta') &&
      last?.type === part.type && last.id === part.id && !part.providerMetadata && !last.providerMetadata) {
    parts[parts.length - 1] = { ...last, delta: last.delta + part.delta };
    return;
  }
  if (part.type === 'response-metadata') {
    parts.push({ type: 'response-metadata', id: part.id, modelId: part.modelId, timestamp: part.timestamp?.toISOString() });
    return;
  }
  parts.push(part.type === 'file' ? { ...part, data: base64(part.data) } : part);
}

function revivePart(p: StoredPart): LanguageModelV3StreamPart {
  if (p.type !== 'response-metadata') return p;
  return { ...p, timestamp: p.timestamp ? new Date(p.timestamp) : undefined };
}

const describe = (err: unknown) => (err instanceof Error ? err.message : typeof err === 'string' ? err : JSON.stringify(err));
