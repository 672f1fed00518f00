// The agent SDK's types as a TypeScript consumer sees them through `exports`.
import { defineAgent, redisMemory, RetryAfterError, TransientError, type Agent, type RunContext, type RunInput } from 'baton-agents';
import type { IsAny } from './is-any.ts';

export const triage = defineAgent({
  name: 'triage',
  memory: redisMemory({ window: { maxMessages: 20 } }),
  async run(ctx: RunContext) {
    const input: RunInput = ctx.input;
    const plan = await ctx.step('plan', async ({ idempotencyKey }) => `${idempotencyKey}:${input.content}`);
    if (ctx.attempt === 1) throw new RetryAfterError('provider asked for a pause', 1_000);
    if (!plan) throw new TransientError('empty plan');
    ctx.emit(plan);
    return { answer: plan, payload: { length: plan.length } };
  },
});

const agent: Agent = triage;
// An unresolved import in a declaration file turns types into `any` without an error; these pin them down.
export const typed: [IsAny<Agent>, IsAny<RunContext>, IsAny<typeof defineAgent>] = [false, false, false];
export { agent };
