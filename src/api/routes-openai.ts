import { z } from 'zod';
import type { ResponseStreamEvent } from 'openai/resources/responses/responses';
import { BatonError } from '../lib/errors.ts';
import { ResponseProjection } from '../lib/openai-compat/response-events.ts';
import { headOf, OpenAiResponses, type ResponseRequest } from '../lib/openai-compat/responses.ts';
import { ChatCompletionProjection } from '../lib/openai-compat/chat-completion-events.ts';
import { OpenAiChatCompletions, type ChatRequest } from '../lib/openai-compat/chat-completions.ts';
import type { ApiKeyInfo } from '../lib/tenancy/api-keys.ts';
import type { AppDeps } from './deps.ts';
import { chatBody, isOpenAiPath, OPENAI_PATHS, responseParams, responsesBody, retrieveQuery } from './openai-schemas.ts';
import { route, type RouteSpec } from './route.ts';
import { admitStream } from './routes-runs.ts';
import { emptyBody } from './schemas.ts';
import { serveEvents, type EventEncoder } from './sse.ts';

/**
 * OpenAI's Responses API and Chat Completions under /v1 (docs/openai-api.md): an OpenAI SDK
 * with Baton's URL and a key of a scope as its base URL and API key is a Baton client. The key's scope is the
 * tenant: a response of another scope is 404 like one that never was. Errors are in
 * OpenAI's shape (openai-errors.ts); events are OpenAI's, folded from the run's event log
 * (lib/openai-compat/response-events.ts) and served by the same SSE machinery as Baton's own.
 */

export { OPENAI_PATHS };

/** A route of the OpenAI-compatible API. */
export const isOpenAiRoute = (r: RouteSpec) => isOpenAiPath(r.path);

const responseObject = z.object({ id: z.string(), object: z.literal('response'), status: z.string(), output: z.array(z.unknown()) }).loose();

const apis = new WeakMap<AppDeps, { responses: OpenAiResponses; chat: OpenAiChatCompletions }>();
/** The process's OpenAI-compatible APIs, on its deps. */
function apisOf(d: AppDeps) {
  let a = apis.get(d);
  if (!a) {
    const common = { submissions: d.submissions, streams: d.streams, models: d.config.OPENAI_COMPAT_MODELS, runtime: d.config.RUNTIME };
    a = { responses: new OpenAiResponses({ ...common, store: d.store }), chat: new OpenAiChatCompletions(common) };
    apis.set(d, a);
  }
  return a;
}
const responsesOf = (d: AppDeps) => apisOf(d).responses;

/** The scope a key of the OpenAI-compatible API acts in: its own. An operator key has none. */
function scopeOf(key: ApiKeyInfo | undefined): { scope: string; keyId: string } {
  if (!key || key.role === 'operator') throw new BatonError('FORBIDDEN', 'An operator key has no scope: use a key of a scope.');
  return { scope: key.scope, keyId: key.id };
}

/** Frames OpenAI events after `after` (a sequence number) as SSE: `event:` its type, `data:` the event. */
function openAiFrames(projection: ResponseProjection, after = -1): EventEncoder {
  return {
    encode: (events) => ({
      text: projection.apply(events)
        .filter((e: ResponseStreamEvent) => e.sequence_number > after)
        .map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`)
        .join(''),
      done: false,
    }),
  };
}

const ERRORS = ['RUN_NOT_FOUND', 'FORBIDDEN'] as const;

export const openAiRoutes: RouteSpec[] = [
  route({
    method: 'post', path: '/v1/responses',
    summary: "OpenAI's Responses API: a run of the agent `model` names in the key's scope. Waits for the answer, streams it " +
      '(`stream: true`: OpenAI\'s events) or, with `background: true`, answers at once (status `queued`).',
    access: 'key', body: responsesBody,
    ok: {
      200: { description: "the response, ended or (background) queued; with `stream: true`, text/event-stream of the response's events", schema: responseObject },
    },
    errors: [...ERRORS, 'UNKNOWN_AGENT', 'SESSION_BUSY', 'DRAINING', 'RATE_LIMITED', 'TOO_MANY_STREAMS'],
    async handler({ body, key, http, signal }, d) {
      const { scope, keyId } = scopeOf(key);
      const req = body as ResponseRequest;
      const streaming = req.stream === true;
      const scopeCap = streaming ? await d.limits.maxStreams(scope) : 0;
      const made = await responsesOf(d).create(scope, req, {
        signal, traceHeaders: http.req.headers,
        admit: streaming ? () => admitStream(d, http.res, signal, scope, { credential: keyId, keyId }, scopeCap) : undefined,
      });
      if (made.admitted) {
        const encode = openAiFrames(new ResponseProjection(made.head));
        await serveEvents(http.req, http.res, d.streams, { scope, runId: made.run.id, afterId: '0', fresh: made.created }, { ...made.admitted, encoder: encode });
        return undefined;
      }
      if (req.background) return { body: new ResponseProjection(headOf(made.run)).response() };
      return { body: await responsesOf(d).settled(scope, made.run, { fresh: made.created, signal }) };
    },
  }),
  route({
    method: 'get', path: '/v1/responses/:responseId',
    summary: 'A response as its run\'s events make it now; with `stream=true`, its events after `starting_after` (replayed, then live).',
    access: 'key', params: responseParams, query: retrieveQuery,
    ok: {
      200: { description: 'the response, or (stream=true) its events', schema: responseObject },
    },
    errors: [...ERRORS, 'TOO_MANY_STREAMS'],
    async handler({ params: { responseId }, query, key, http, signal }, d) {
      const { scope, keyId } = scopeOf(key);
      if (query.stream !== 'true') return { body: await responsesOf(d).response(scope, responseId) };
      const run = await responsesOf(d).run(scope, responseId);
      const sse = admitStream(d, http.res, signal, scope, { credential: keyId, keyId }, await d.limits.maxStreams(scope));
      const encode = openAiFrames(new ResponseProjection(headOf(run)), query.starting_after ?? -1);
      await serveEvents(http.req, http.res, d.streams, { scope, runId: run.id, afterId: '0' }, { ...sse, encoder: encode });
      return undefined;
    },
  }),
  route({
    method: 'post', path: '/v1/responses/:responseId/cancel',
    summary: "Cancels a response's run (a running one stops at once); its stream ends with response.incomplete, status `cancelled`.",
    access: 'key', params: responseParams, body: emptyBody,
    ok: { 200: { description: 'the response after the cancel', schema: responseObject } },
    errors: [...ERRORS],
    async handler({ params: { responseId }, key }, d) {
      return { body: await responsesOf(d).cancel(scopeOf(key).scope, responseId) };
    },
  }),
  route({
    method: 'delete', path: '/v1/responses/:responseId',
    summary: "Deletes a response that has ended (its run's record, events and steps; its entries in the listings); " +
      "the turn it committed stays in its session's history. One not ended is 409: cancel it first.",
    access: 'key', params: responseParams,
    ok: { 200: { description: 'the response is deleted', schema: z.object({ id: z.string(), object: z.literal('response'), deleted: z.literal(true) }) } },
    errors: [...ERRORS, 'RUN_NOT_FINISHED'],
    async handler({ params: { responseId }, key }, d) {
      return { body: await responsesOf(d).delete(scopeOf(key).scope, responseId) };
    },
  }),
  route({
    method: 'get', path: '/v1/responses/:responseId/input_items',
    summary: 'The input items of a response, as its request gave them.',
    access: 'key', params: responseParams,
    ok: { 200: { description: 'a list of input items', schema: z.object({ object: z.literal('list'), data: z.array(z.unknown()) }).loose() } },
    errors: [...ERRORS],
    async handler({ params: { responseId }, key }, d) {
      const items = await responsesOf(d).inputItems(scopeOf(key).scope, responseId);
      const data = items.map((item, i) => ({ id: `${responseId.replace(/^resp_/, 'msg_')}_in${i}`, ...item }));
      return { body: { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: false } };
    },
  }),
  route({
    method: 'post', path: '/v1/chat/completions',
    summary: "OpenAI's Chat Completions: a run of the agent `model` names, in a session of its own, the earlier messages its conversation. " +
      'Streamed (`data:` chunks, then `data: [DONE]`; `stream_options.include_usage`) or not. Function `tools` are the client\'s: ' +
      'a completion that calls them ends with `tool_calls` (finish_reason `tool_calls`), answered by `tool` messages in the next request.',
    access: 'key', body: chatBody,
    ok: { 200: { description: 'the chat completion; with `stream: true`, text/event-stream of its chunks', schema: z.object({ id: z.string() }).loose() } },
    errors: [...ERRORS, 'UNKNOWN_AGENT', 'DRAINING', 'RATE_LIMITED', 'TOO_MANY_STREAMS'],
    async handler({ body, key, http, signal }, d) {
      const { scope, keyId } = scopeOf(key);
      const req = body as ChatRequest;
      const streaming = req.stream === true;
      const scopeCap = streaming ? await d.limits.maxStreams(scope) : 0;
      const made = await apisOf(d).chat.create(scope, req, {
        signal, traceHeaders: http.req.headers,
        admit: streaming ? () => admitStream(d, http.res, signal, scope, { credential: keyId, keyId }, scopeCap) : undefined,
      });
      if (!made.admitted) return { body: await apisOf(d).chat.settled(scope, made.run, made.head, { fresh: made.created, signal }) };
      const projection = new ChatCompletionProjection(made.head, req.stream_options?.include_usage === true);
      const encoder: EventEncoder = {
        encode: (events) => ({ text: projection.apply(events).map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join(''), done: false }),
        trailer: 'data: [DONE]\n\n',
      };
      await serveEvents(http.req, http.res, d.streams, { scope, runId: made.run.id, afterId: '0', fresh: made.created }, { ...made.admitted, encoder });
      return undefined;
    },
  }),
];
