import { defineAgent } from '../sdk/agent.ts';

/**
 * Streams the input back word by word (whitespace kept, so the tokens concatenate to the
 * input exactly) and answers with it. `metadata.delayMs` waits between tokens.
 */
export const echo = defineAgent({
  name: 'echo',
  description: 'Answers with the message it was given, streamed word by word.',
  async run(ctx) {
    const delay = Number(ctx.metadata.delayMs ?? 0);
    const tokens = ctx.input.content.match(/\s*\S+\s*|\s+/g) ?? [];
    for (const token of tokens) {
      if (ctx.signal.aborted) break;
      if (delay > 0) await sleep(delay, ctx.signal);
      ctx.emit(token);
    }
    return { answer: ctx.input.content };
  },
});

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    // Remove the abort listener when the timer fires: one per token would pile up on the signal.
    const onAbort = () => { clearTimeout(t); resolve(); };
    const t = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve(); }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
