import { DefaultChatTransport, readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * The chat routes through the AI SDK's own client: DefaultChatTransport sends and resumes,
 * its uiMessageChunkSchema parses every chunk, readUIMessageStream builds the message.
 */
let h: Harness;
let apiUrl: string;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  apiUrl = (await h.startApi()).url;
  await h.startWorker();
  acme = await h.client(apiUrl, 'acme', 'client');
});

function transport(c: ScopeClient = acme, body: Record<string, unknown> = {}) {
  return new DefaultChatTransport<UIMessage>({
    api: `${apiUrl}/v1/scopes/${c.scope}/chat`, headers: { authorization: c.headers.authorization },
    body: { runtime: h.runtime, ...body },
  });
}

const userMessage = (text: string, id = `u-${Math.random()}`): UIMessage => ({ id, role: 'user', parts: [{ type: 'text', text }] });

/** Every chunk of a stream, and the message the SDK builds from them. */
async function read(stream: ReadableStream<UIMessageChunk>, message?: UIMessage) {
  const chunks: UIMessageChunk[] = [];
  const [mine, sdk] = stream.tee();
  const collect = (async () => { for await (const c of mine) chunks.push(c); })();
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream: sdk, message })) last = m;
  await collect;
  return { chunks, message: last! };
}

const textOf = (m: UIMessage) => m.parts.flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');

describe('POST …/chat', () => {
  it('streams a user message\'s answer as the SDK\'s UI message stream, with its headers and [DONE]', async () => {
    const res = await fetch(`${apiUrl}/v1/scopes/acme/chat`, {
      method: 'POST', headers: { ...acme.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'c-raw', messages: [userMessage('hello there you')], trigger: 'submit-message', runtime: h.runtime }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(text).toMatch(/^id: \d+-\d+$/m);
  });

  it('builds the answer as one text part, finished, with usage-free metadata naming the run', async () => {
    const stream = await transport().sendMessages({
      chatId: 'c1', messages: [userMessage('one two three four')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined,
    });
    const { chunks, message } = await read(stream);
    expect(textOf(message)).toBe('one two three four');
    expect(chunks[0]).toMatchObject({ type: 'start' });
    expect(chunks.at(-1)).toMatchObject({ type: 'finish', finishReason: 'stop' });
    expect(chunks.map((c) => c.type)).toContain('start-step');
    expect(message.id).toBe((message.metadata as { runId: string }).runId);
  });
});
