// An agent module in TypeScript: `baton worker --agents ./agent.ts` loads it through tsx (or
// Node's type stripping). Its first attempt throws the package's TransientError, which the
// worker must recognise as the same class it retries on, so the run succeeds on attempt 2.
import { defineAgent, TransientError, type RunContext } from 'baton-agents';

interface Greeting { prefix: string; attempt: number }

function greet(ctx: RunContext): Greeting {
  return { prefix: 'ts: ', attempt: ctx.attempt };
}

export default defineAgent({
  name: 'smoke-ts',
  maxAttempts: 3,
  async run(ctx: RunContext) {
    const g: Greeting = greet(ctx);
    if (g.attempt === 1) throw new TransientError('first attempt fails on purpose');
    ctx.emit(g.prefix + ctx.input.content);
    return { answer: g.prefix + ctx.input.content, payload: { attempt: g.attempt } };
  },
});
