import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import * as ai6 from 'ai';
import type { UIMessage, UIMessageChunk } from 'ai';
import { describe, expect, it } from 'vitest';
import { ChatEncoder } from '../src/api/chat-stream.ts';
import type { RunEvent } from '../src/lib/streams/log.ts';

/**
 * The encoder alone, on logs written by hand: what a page holds after a later attempt (a worker
 * died, a wait was answered) runs the turn again. Parsed by the SDK's transport, built by its
 * readUIMessageStream: `ai` 6 (the server's) and `ai` 7 (the one @ai-sdk/react 4 uses).
 */
const ai7 = (await import(pathToFileURL(createRequire(import.meta.resolve('@ai-sdk/react')).resolve('ai')).href)) as typeof ai6;
const SDKS = [['ai 6', ai6], ['ai 7', ai7]] as const;
let seq = 0;
const ev = (type: string, data: unknown): RunEvent => ({ id: `1-${++seq}`, type, data: JSON.stringify(data) });
const token = (text: string) => ev('token', { text, agent: 'a', role: 'assistant' });
const attempt = (n: number, extra: Record<string, unknown> = {}) => ev('attempt', { attempt: n, maxAttempts: 3, ...extra });
const end = (answer: string) => ev('end', { status: 'succeeded', result: { answer, finishReason: 'stop', toolCallsSeen: 0 } });

async function page(sdk: typeof ai6, events: RunEvent[], batches = 1): Promise<{ chunks: UIMessageChunk[]; message: UIMessage }> {
  const encoder = new ChatEncoder({ messageId: 'r1', runId: 'r1' });
  let text = encoder.head();
  const size = Math.ceil(events.length / batches);
  for (let i = 0; i < events.length; i += size) text += encoder.encode(events.slice(i, i + size)).text;
  const t = new sdk.DefaultChatTransport<UIMessage>({ api: 'http://unused.test', fetch: async () => new Response(text) });
  const stream = await t.sendMessages({ chatId: 'x', messages: [], trigger: 'submit-message', messageId: undefined, abortSignal: undefined });
  const [mine, theirs] = stream.tee();
  const chunks: UIMessageChunk[] = [];
  const collect = (async () => { for await (const c of mine) chunks.push(c); })();
  let message: UIMessage | undefined;
  for await (const m of sdk.readUIMessageStream({ stream: theirs })) message = m;
  await collect;
  return { chunks, message: message! };
}

const texts = (m: UIMessage) => m.parts.flatMap((p) => (p.type === 'text' ? [[p.text, p.state]] : []));

describe.each(SDKS)('a later attempt, read by %s', (_, sdk) => {
  it('that says the same again sends nothing twice and grows the open part: the whole answer once, in one part', async () => {
    const { message } = await page(sdk, [
      attempt(1), token('The answer '), token('is'),
      attempt(2, { recovered: true }), token('The '), token('answer is'), token(' forty-two.'), end('The answer is forty-two.'),
    ], 3);
    expect(texts(message)).toEqual([['The answer is forty-two.', 'done']]);
  });

  it('that says something else closes the partial part as it stands and streams its text as a new part, never glued', async () => {
    const { chunks, message } = await page(sdk, [
      attempt(1), token('Paris is '), token('sunny'),
      attempt(2, { recovered: true }), token('Paris is '), token('rainy today.'), end('Paris is rainy today.'),
    ]);
    expect(texts(message)).toEqual([['Paris is sunny', 'done'], ['Paris is rainy today.', 'done']]);
    const ids = chunks.flatMap((c) => (c.type === 'text-start' ? [c.id] : []));
    expect(new Set(ids).size).toBe(2);
    // The first part was closed before the second started.
    expect(chunks.findIndex((c) => c.type === 'text-end' && c.id === ids[0])).toBeLessThan(chunks.findIndex((c) => c.type === 'text-start' && c.id === ids[1]));
  });

  it('after a wait replays the memoized call and its tool call silently, then streams the rest as the next step', async () => {
    const call = { callId: 'c1', name: 'refund', args: { order: 'A' }, agent: 'a', role: 'assistant' };
    const { chunks, message } = await page(sdk, [
      attempt(1), token('Let me check.'), ev('tool-call', call),
      ev('status', { status: 'waiting', waits: [{ key: 'wait:refund:1', kind: 'approval', name: 'refund', prompt: { order: 'A' }, since: 1 }] }),
      ev('status', { status: 'queued', wait: { key: 'wait:refund:1', outcome: 'resumed' } }),
      attempt(1, { resumed: true }), token('Let me check.'), ev('tool-call', call),
      ev('tool-result', { ...call, role: 'tool', ok: true, result: { refunded: 'A' } }), token('Done.'), end('Let me check.\n\nDone.'),
    ]);
    expect(message.parts.filter((p) => p.type !== 'step-start').map((p) => p.type)).toEqual(['text', 'dynamic-tool', 'text']);
    expect(texts(message)).toEqual([['Let me check.', 'done'], ['Done.', 'done']]);
    expect(message.parts.find((p) => p.type === 'dynamic-tool')).toMatchObject({ toolCallId: 'c1', state: 'output-available', output: { refunded: 'A' } });
    // One model call per step: the text after the tool's result is the second.
    expect(chunks.filter((c) => c.type === 'start-step')).toHaveLength(2);
    // The approval was asked for on its call (the replay read it with the resumption behind it: the stream went on).
    expect(chunks.find((c) => c.type === 'tool-approval-request')).toEqual({ type: 'tool-approval-request', approvalId: 'r1/wait:refund:1', toolCallId: 'c1' });
  });
});

describe.each(SDKS)('a steering message the run took, read by %s', (_, sdk) => {
  it('is a data-steering part where it was taken, between the text before it and the text after', async () => {
    const { message } = await page(sdk, [
      attempt(1), token('Looking it up.'),
      ev('steering', { messageId: 'm-1', outcome: 'pending' }),
      ev('steering', { messageId: 'm-1', outcome: 'delivered', step: 1, content: 'in Celsius please' }),
      token('21 °C.'), end('Looking it up.\n\n21 °C.'),
    ]);
    expect(message.parts.filter((p) => p.type !== 'step-start').map((p) => (p.type === 'text' ? ['text', p.text] : [p.type, (p as any).data])))
      .toEqual([
        ['text', 'Looking it up.'],
        ['data-steering', { id: 'm-1', content: 'in Celsius please', step: 1 }],
        ['text', '21 °C.'],
      ]);
  });
});
