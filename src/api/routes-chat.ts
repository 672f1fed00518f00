import { BatonError } from '../lib/errors.ts';
import type { ApprovalAnswer } from '../lib/engine/operations/chat-turns.ts';
import { chatMessages } from './chat-messages.ts';
import { ChatEncoder, parseApprovalId, UI_MESSAGE_STREAM_HEADERS } from './chat-stream.ts';
import { presentRun } from './presenters.ts';
import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteInput, type RouteSpec } from './route.ts';
import { admitStream } from './routes-runs.ts';
import {
  chatBody, chatMessagesQuery, chatParams, chatStreamQuery, emptyBody, lastEventIdHeader, scopeParams, type ChatBody,
} from './schemas.ts';
import type { AppDeps } from './deps.ts';
import { serveEvents } from './sse.ts';

/** What a chat page's fetches send: its key (or none, with a stream token), its JSON, a resume's id. */
const POST_HEADERS = { headers: ['Authorization', 'Content-Type'] } as const;
const GET_HEADERS = { headers: ['Authorization', 'Last-Event-ID'] } as const;

/**
 * The AI SDK's chat routes (`useChat` with `DefaultChatTransport({ api: …/chat })`): a chat is
 * a session, a turn a run, its answer the run's events as a UI message stream (chat-stream.ts).
 * docs/chat-pages.md is the contract.
 */
export const chatRoutes: RouteSpec[] = [
  route({
    method: 'post', path: `${SCOPE}/chat`,
    summary: 'A chat turn, as the AI SDK\'s DefaultChatTransport sends it: a user message submits a run in session `id`; ' +
      '`regenerate-message` re-runs the turn that answered `messageId`; an assistant message carrying approval answers ' +
      'resumes the waits they answer. The answer is the run as a UI message stream.',
    access: 'client', cors: POST_HEADERS,
    params: scopeParams, body: chatBody,
    ok: { 200: { description: 'the turn\'s answer, streamed', schema: res.uiMessageStream, contentType: 'text/event-stream' } },
    errors: [
      'RUN_NOT_FOUND', 'RUN_NOT_FINISHED', 'WAIT_NOT_PENDING', 'SESSION_BUSY', 'DRAINING', 'RATE_LIMITED', 'TOO_MANY_STREAMS',
      'SCHEMA_CHECKS_BUSY', 'UNKNOWN_AGENT', 'SESSION_HISTORY_FULL',
    ],
    async handler(input, d) {
      const { params: { scope }, http } = input;
      const turn = await startTurn(input, d);
      const encoder = new ChatEncoder({ messageId: turn.messageId, runId: turn.runId, quietThrough: turn.quietThrough });
      await serveEvents(http.req, http.res, d.streams, { scope, runId: turn.runId, afterId: '0', fresh: turn.fresh }, {
        ...turn.sse, encoder, headers: { ...UI_MESSAGE_STREAM_HEADERS, 'Baton-Run-Id': turn.runId },
      });
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/chat/:chatId/stream`,
    summary: "The running turn's answer of a chat, replayed from the message's start (the SDK's reconnectToStream, " +
      'resumeStreamIsReplay), or after Last-Event-ID; 204 when no turn runs. A key, or a stream token for the session.',
    access: 'stream', cors: GET_HEADERS,
    params: chatParams, query: chatStreamQuery, headers: { 'Last-Event-ID': lastEventIdHeader },
    ok: {
      200: { description: 'the answer, then live until it ends', schema: res.uiMessageStream, contentType: 'text/event-stream' },
      204: { description: 'no turn runs in this chat' },
    },
    errors: ['TOO_MANY_STREAMS'],
    async handler({ params: { scope, chatId }, headers, key, http, signal }, d) {
      const run = await d.chats.running(scope, chatId);
      if (!run) return { status: 204 };
      const afterId = headers['last-event-id'];
      const who = key ? { credential: key.id, keyId: key.id } : (http.res.locals.streamCredential as { credential: string; keyId: string });
      const sse = admitStream(d, http.res, signal, scope, who, await d.limits.maxStreams(scope));
      const encoder = new ChatEncoder({ messageId: run.id, runId: run.id, quietThrough: afterId, sameResponse: true });
      await serveEvents(http.req, http.res, d.streams, { scope, runId: run.id, afterId: '0' }, {
        ...sse, encoder, headers: { ...UI_MESSAGE_STREAM_HEADERS, 'Baton-Run-Id': run.id },
      });
      return undefined;
    },
  }),
  route({
    method: 'get', path: `${SCOPE}/chat/:chatId/messages`,
    summary: "A chat's history as the AI SDK's UIMessage[], oldest first (the running turn's question last): " +
      'what useChat starts from before it resumes. A key, or a stream token for the session.',
    access: 'stream', cors: GET_HEADERS, readCost: true,
    params: chatParams, query: chatMessagesQuery,
    ok: { 200: { description: 'a page of messages', schema: res.chatMessagesResponse } },
    async handler({ params: { scope, chatId }, query: { limit, cursor } }, d) {
      const history = await d.chats.history(scope, chatId, { limit, cursor }, d.config.PAGE_MAX_BYTES);
      return { body: { messages: await chatMessages(history), nextCursor: history.nextCursor } };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/chat/:chatId/stop`,
    summary: "Cancel a chat's running turn, from any tab: its model call stops, the answer so far is kept in the history " +
      'marked incomplete, and every open stream of it ends with `abort`.',
    access: 'client', cors: POST_HEADERS,
    params: chatParams, body: emptyBody,
    ok: { 200: { description: 'whether a turn was running, and the run after the cancel', schema: res.chatStopResponse } },
    async handler({ params: { scope, chatId } }, d) {
      const run = await d.chats.stop(scope, chatId);
      return { body: run ? { stopped: true, run: presentRun(run, `/v1/scopes/${scope}`) } : { stopped: false } };
    },
  }),
];

/** The run a POST …/chat streams, and how: which message it builds, what the page has of it already. */
async function startTurn(
  { params: { scope }, body, key, http, signal }: RouteInput<{ scope: string }, unknown, ChatBody>, d: AppDeps,
): Promise<{ runId: string; messageId: string; fresh: boolean; quietThrough?: string; sse: ReturnType<typeof admitStream> }> {
  const scopeCap = await d.limits.maxStreams(scope);
  const admit = () => admitStream(d, http.res, signal, scope, { credential: key!.id, keyId: key!.id }, scopeCap);
  const last = body.messages[body.messages.length - 1];
  if (body.trigger === 'regenerate-message') {
    const { run, plan } = await d.chats.toRerun(scope, body.id, body.messageId);
    const s = await d.submissions.submit(d.chats.rerunRequest(scope, run), { signal, rerun: plan, admit, traceHeaders: http.req.headers });
    return { runId: s.run.id, messageId: s.run.id, fresh: s.created, sse: s.admitted! };
  }
  if (last.role === 'assistant') {
    const answers = approvalAnswers(last.parts);
    const { run, before } = await d.chats.answer(scope, body.id, answers, signal);
    return { runId: run.id, messageId: last.id, fresh: false, quietThrough: before, sse: admit() };
  }
  const content = last.parts.flatMap((p) => (p.type === 'text' && p.text ? [p.text] : [])).join('\n');
  if (last.role !== 'user' || content === '') {
    throw new BatonError('VALIDATION_FAILED', undefined, [{ path: `body.messages.${body.messages.length - 1}`, message: 'the last message must be a user message with text' }]);
  }
  const s = await d.submissions.submit({
    scope, sessionId: body.id, input: { content }, runtime: body.runtime, agent: body.agent, multitask: 'enqueue',
    ...(body.metadata ? { metadata: body.metadata } : {}), ...(body.maxAttempts ? { maxAttempts: body.maxAttempts } : {}),
  }, { signal, admit, traceHeaders: http.req.headers });
  return { runId: s.run.id, messageId: s.run.id, fresh: s.created, sse: s.admitted! };
}

/** The answers of the SDK's addToolApprovalResponse in a message's tool parts (state `approval-responded`). */
function approvalAnswers(parts: ChatBody['messages'][number]['parts']): ApprovalAnswer[] {
  const answers: ApprovalAnswer[] = [];
  for (const p of parts) {
    if (p.state !== 'approval-responded' || !p.approval || p.approval.approved === undefined) continue;
    const named = parseApprovalId(p.approval.id);
    if (named) answers.push({ ...named, approved: p.approval.approved, ...(p.approval.reason ? { reason: p.approval.reason } : {}) });
  }
  if (answers.length === 0) {
    throw new BatonError('VALIDATION_FAILED', undefined, [{ path: 'body.messages', message: 'the last message is the assistant\'s and answers no approval' }]);
  }
  return answers;
}
