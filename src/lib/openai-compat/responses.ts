import type { Response, ResponseInputItem } from 'openai/resources/responses/responses';
import { ID_PATTERN } from '../contract/ids.ts';
import { BatonError } from '../errors.ts';
import { newRunId } from '../ids.ts';
import type { RunRecord } from '../transitions/record.ts';
import type { RunStore } from '../engine/store.ts';
import type { Submission, Submissions, SubmitOptions, SubmitRequest } from '../engine/submissions.ts';
import type { RunStreams } from '../streams/run-streams.ts';
import { followToEnd } from '../streams/follow-to-end.ts';
import { ResponseProjection, type ResponseHead } from './response-events.ts';

/**
 * OpenAI's Responses API on Baton's runs: a response is a run, its id `resp_<runId>`, its
 * conversation the run's session. A request becomes a submit (model → agent, instructions →
 * the agent's system message, max_output_tokens → its answer limit, the rest kept on the
 * run's metadata under `openai`); the response object and its events are folded from the
 * run's event log (response-events.ts).
 */

/** What POST /v1/responses may carry (the API's schema parses it); every other field is refused by name there. */
export interface ResponseRequest {
  model: string;
  input: string | InputItem[];
  tools?: FunctionToolRequest[] | null;
  instructions?: string | null;
  previous_response_id?: string | null;
  metadata?: Record<string, string> | null;
  max_output_tokens?: number | null;
  store?: boolean | null;
  background?: boolean | null;
  stream?: boolean | null;
}

/** An input message: the user's text, or a system or developer message (joined to the instructions). */
export interface InputMessage {
  type?: 'message';
  role: 'user' | 'system' | 'developer';
  content: string | { type: 'input_text'; text: string }[];
}

/** The output of a call the previous response asked for. */
export interface FunctionCallOutput { type: 'function_call_output'; call_id: string; output: string }

export type InputItem = InputMessage | FunctionCallOutput;

/** A function tool the client runs. */
export interface FunctionToolRequest { type: 'function'; name: string; description?: string | null; parameters?: Record<string, unknown> | null; strict?: boolean | null }

/** A call of a client's function tool, as the built-in chat agent ends a run with it (result.payload.functionCalls). */
export interface FunctionCall { callId: string; name: string; arguments: string }

/** Keys of a run's metadata the OpenAI-compatible API writes itself, so a request's metadata may not use them. */
export const RESERVED_METADATA = ['openai', 'system', 'maxTokens', 'messages', 'tools', 'toolTurn'] as const;

/** The request as the run keeps it (metadata.openai): what its response shows besides its events. */
interface KeptRequest {
  model: string;
  instructions: string | null;
  background: boolean;
  previousResponseId: string | null;
  maxOutputTokens: number | null;
  /** The input items as given, for input_items (a string is the run's input, not kept twice). */
  input?: InputItem[];
  tools?: FunctionToolRequest[];
}

export const responseIdOf = (runId: string) => `resp_${runId}`;

/** What a delete answers, as OpenAI's does. */
export interface ResponseDeleted { id: string; object: 'response'; deleted: true }

/** The run a response id names, or undefined when it names none (answered 404 like an unknown one). */
export function runIdOf(responseId: string): string | undefined {
  const runId = responseId.startsWith('resp_') ? responseId.slice('resp_'.length) : undefined;
  return runId !== undefined && ID_PATTERN.test(runId) ? runId : undefined;
}

export interface OpenAiResponsesDeps {
  store: RunStore;
  submissions: Submissions;
  streams: RunStreams;
  /** OPENAI_COMPAT_MODELS: upstream model names → the agent that runs them. */
  models: Record<string, string>;
  /** The runtime whose workers run these responses (RUNTIME). */
  runtime: string;
}

export class OpenAiResponses {
  constructor(private readonly d: OpenAiResponsesDeps) {}

  /**
   * Submits the run of a response request. The run is Baton's like any other: it goes on,
   * and is stored, whatever becomes of the request that made it.
   */
  async create<A>(scope: string, req: ResponseRequest, o: SubmitOptions<A>): Promise<Submission<A> & { head: ResponseHead }> {
    const previous = req.previous_response_id ? await this.previous(scope, req.previous_response_id) : undefined;
    const sessionId = previous?.sessionId ?? `oai-${newRunId()}`;
    const toolTurn = previous ? answeredCalls(previous, req.input) : undefined;
    const system = systemText(req);
    const tools = req.tools?.length ? req.tools : undefined;
    const kept: KeptRequest = {
      model: req.model, instructions: req.instructions ?? null, background: req.background === true,
      previousResponseId: req.previous_response_id ?? null, maxOutputTokens: req.max_output_tokens ?? null,
      ...(typeof req.input === 'string' ? {} : { input: req.input }), ...(tools ? { tools } : {}),
    };
    const submit: SubmitRequest = {
      scope, sessionId, runtime: this.d.runtime, agent: this.d.models[req.model] ?? req.model,
      // Outputs alone answer the previous response's calls: its question is asked again, now with them.
      input: { content: toolTurn ? previous!.input.content : userText(req.input) },
      metadata: {
        ...req.metadata, openai: kept,
        ...(system ? { system } : {}), ...(req.max_output_tokens ? { maxTokens: req.max_output_tokens } : {}),
        ...(tools ? { tools: tools.map(({ name, description, parameters }) => ({ name, description, parameters })) } : {}),
        ...(toolTurn ? { toolTurn } : {}),
      },
    };
    const made = await this.d.submissions.submit(submit, o);
    return { ...made, head: headOf(made.run) };
  }

  /** The run of a response of the scope; 404 for every id that names none of its runs. */
  async run(scope: string, responseId: string): Promise<RunRecord> {
    const runId = runIdOf(responseId);
    const run = runId === undefined ? undefined : await this.d.store.get(scope, runId);
    if (!run) throw new BatonError('RUN_NOT_FOUND', `No response with id '${responseId}' found.`);
    return run;
  }

  /** The response object as its run's event log makes it now. */
  async response(scope: string, responseId: string): Promise<Response> {
    const run = await this.run(scope, responseId);
    const projection = new ResponseProjection(headOf(run));
    for await (const page of this.d.streams.pages(scope, run.id)) projection.apply(page);
    return projection.response();
  }

  /**
   * The response once its run ended, its events followed from the start (replay, then live).
   * Rejects when `signal` aborts: the client left, and the run goes on without it.
   */
  async settled(scope: string, run: RunRecord, o: { fresh: boolean; signal: AbortSignal }): Promise<Response> {
    const projection = new ResponseProjection(headOf(run));
    await followToEnd(this.d.streams, scope, run.id, o, (events) => void projection.apply(events));
    return projection.response();
  }

  /** Cancels the response's run (a running one stops at once); answers the response as it then is. */
  async cancel(scope: string, responseId: string): Promise<Response> {
    const run = await this.run(scope, responseId);
    await this.d.store.cancel(scope, run.id);
    return this.response(scope, responseId);
  }

  /**
   * Deletes a response that has ended: its run's record, events and steps go now, as at the end
   * of its retention, and it leaves every listing. The turn it committed stays in its
   * session's history, so a response continuing an earlier one of the conversation still sees
   * it. One that has not ended is refused (409): cancel it first.
   */
  async delete(scope: string, responseId: string): Promise<ResponseDeleted> {
    const runId = runIdOf(responseId);
    const outcome = runId === undefined ? 'not-found' : await this.d.store.deleteRun(scope, runId);
    if (outcome === 'not-found') throw new BatonError('RUN_NOT_FOUND', `No response with id '${responseId}' found.`);
    if (outcome === 'not-ended') {
      throw new BatonError('RUN_NOT_FINISHED', `Response '${responseId}' has not ended yet: cancel it, then delete it once its status is cancelled.`);
    }
    return { id: responseId, object: 'response', deleted: true };
  }

  /** The input items of a response, as its request gave them (a string as one user message). */
  async inputItems(scope: string, responseId: string): Promise<(ResponseInputItem.Message | ResponseInputItem.FunctionCallOutput)[]> {
    const run = await this.run(scope, responseId);
    const kept = keptOf(run);
    const given: InputItem[] = kept?.input ?? [{ role: 'user', content: run.input.content }];
    return given.map((m) => (m.type === 'function_call_output'
      ? { type: 'function_call_output', call_id: m.call_id, output: m.output, status: 'completed' }
      : {
        type: 'message', role: m.role, status: 'completed',
        content: typeof m.content === 'string' ? [{ type: 'input_text', text: m.content }] : m.content.map((p) => ({ type: 'input_text', text: p.text })),
      }));
  }

  /** The run previous_response_id names: of this scope, or the request is refused naming the field. */
  private async previous(scope: string, responseId: string): Promise<RunRecord> {
    const runId = runIdOf(responseId);
    const run = runId === undefined ? undefined : await this.d.store.get(scope, runId);
    if (!run) {
      throw new BatonError('RUN_NOT_FOUND', `Previous response with id '${responseId}' not found.`, [
        { path: 'body.previous_response_id', message: 'no response of this scope has this id' },
      ]);
    }
    return run;
  }
}

/** What a response shows of the request that made its run (a run made by Baton's own API: its agent as the model). */
export function headOf(run: RunRecord): ResponseHead {
  const kept = keptOf(run);
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(run.metadata ?? {})) {
    if (!(RESERVED_METADATA as readonly string[]).includes(k) && typeof v === 'string') metadata[k] = v;
  }
  return {
    id: responseIdOf(run.id), createdAt: Math.floor(run.createdAt / 1000), model: kept?.model ?? run.agent,
    instructions: kept?.instructions ?? null, metadata, background: kept?.background ?? false,
    previousResponseId: kept?.previousResponseId ?? null, maxOutputTokens: kept?.maxOutputTokens ?? null, tools: kept?.tools ?? [],
  };
}

/**
 * The previous response's calls with the outputs the input gives them (the built-in agent's
 * `metadata.toolTurn`), or undefined when the input gives none. Every call needs its output,
 * and every output a call, or the request is refused naming the input.
 */
function answeredCalls(previous: RunRecord, input: ResponseRequest['input']): { calls: FunctionCall[]; outputs: { callId: string; output: string }[] } | undefined {
  if (typeof input === 'string') return undefined;
  const outputs = input.flatMap((m, i) => (m.type === 'function_call_output' ? [{ i, callId: m.call_id, output: m.output }] : []));
  if (outputs.length === 0) return undefined;
  const calls = (previous.result?.payload as { functionCalls?: FunctionCall[] } | undefined)?.functionCalls ?? [];
  const refuse = (path: string, message: string) => {
    throw new BatonError('VALIDATION_FAILED', undefined, [{ path, message }]);
  };
  for (const o of outputs) {
    if (!calls.some((c) => c.callId === o.callId)) refuse(`body.input.${o.i}.call_id`, 'the previous response made no call with this id');
  }
  for (const c of calls) {
    if (!outputs.some((o) => o.callId === c.callId)) refuse('body.input', `no output for the call ${c.callId} (${c.name}) of the previous response`);
  }
  return { calls, outputs: outputs.map(({ callId, output }) => ({ callId, output })) };
}

function keptOf(run: RunRecord): KeptRequest | undefined {
  const kept = run.metadata?.openai;
  return kept && typeof kept === 'object' ? kept as KeptRequest : undefined;
}

const textOf = (m: InputMessage) => (typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join(''));

const messagesOf = (input: ResponseRequest['input'], user: boolean) =>
  (typeof input === 'string' ? [] : input.filter((m): m is InputMessage => m.type !== 'function_call_output' && (m.role === 'user') === user));

/** The run's input: the user messages' text, one after another (a blank line between two). */
function userText(input: ResponseRequest['input']): string {
  return typeof input === 'string' ? input : messagesOf(input, true).map(textOf).join('\n\n');
}

/** The agent's system message: the instructions, then the input's system and developer messages. */
function systemText(req: ResponseRequest): string {
  return [req.instructions ?? '', ...messagesOf(req.input, false).map(textOf)].filter(Boolean).join('\n\n');
}
