import { defineAgent, type Agent } from '../../src/lib/sdk/agent.ts';
import { PermanentError, RetryAfterError, TransientError } from '../../src/lib/sdk/errors.ts';

/**
 * In-process agents that park a run in each status the stats and drain tests need:
 * `gate` runs until the test opens its gate (named by the input), `slow-retry` retries a
 * minute later, `fail` fails at once, `charge` blocks (a non-idempotent step that never
 * recorded a result), `approve` waits for the approval of its `ship` tool.
 */
const gates = new Map<string, { open: Promise<void>; release: () => void }>();

function gate(name: string) {
  let g = gates.get(name);
  if (!g) {
    let release!: () => void;
    const open = new Promise<void>((r) => { release = r; });
    g = { open, release };
    gates.set(name, g);
  }
  return g;
}

/** Lets every run waiting at gate `name` (now or later) go on. */
export const openGate = (name: string) => gate(name).release();

export const tenancyAgents: Agent[] = [
  defineAgent({
    name: 'gate',
    async run(ctx) {
      const aborted = new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }));
      await Promise.race([gate(ctx.input.content).open, aborted]);
      return { answer: `passed ${ctx.input.content}` };
    },
  }),
  defineAgent({
    name: 'slow-retry',
    run() {
      throw new RetryAfterError('provider says come back in a minute', 60_000);
    },
  }),
  defineAgent({
    name: 'fail',
    run() {
      throw new PermanentError('this input can never work');
    },
  }),
  defineAgent({
    name: 'charge',
    maxAttempts: 3,
    async run(ctx) {
      // The first attempt starts the step and dies inside it: the next attempt cannot know
      // whether the charge happened, so the run blocks.
      await ctx.step('charge', () => { throw new TransientError('connection reset mid-charge'); }, { idempotent: false });
      return { answer: 'charged' };
    },
  }),
  defineAgent({
    name: 'approve',
    async run(ctx) {
      return ctx.tool('ship', { to: ctx.input.content }, () => `shipped to ${ctx.input.content}`, { approval: true });
    },
  }),
];
