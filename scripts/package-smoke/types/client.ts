// The client's types; also checked with DOM types and no Node types (tsconfig.browser.json).
import { BatonApiError, BatonClient, type Run, type RunStreamEvent } from 'baton-agents/client';
import type { IsAny } from './is-any.ts';

export async function follow(url: string, apiKey: string): Promise<string> {
  const baton = new BatonClient({ url, apiKey, scope: 'dev' });
  const run: Run = await baton.submit({ sessionId: 's1', input: { content: 'hello' }, multitask: 'enqueue' });
  let text = '';
  for await (const e of baton.stream(run.id)) {
    const event: RunStreamEvent = e;
    if (event.type === 'token') text += event.data.text;
    if (event.type === 'end' && event.data.status === 'failed') throw new BatonApiError(500, event.data.error?.code ?? 'FAILED', 'failed');
  }
  return text;
}

export const typed: [IsAny<Run>, IsAny<RunStreamEvent>, IsAny<BatonClient>] = [false, false, false];
