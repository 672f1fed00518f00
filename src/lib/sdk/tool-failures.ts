import type { RunContext } from './agent.ts';

/**
 * A tool's TransientError etc. (baton/ai), waiting for the run's next model call to end the
 * attempt: the AI SDK hands whatever a tool throws to the model as a tool error and goes on,
 * so the wrapped model is where such an error can end the attempt. The first one wins.
 */
const toolFailures = new WeakMap<RunContext, unknown>();

export function holdToolFailure(ctx: RunContext, err: unknown): void {
  if (!toolFailures.has(ctx)) toolFailures.set(ctx, err);
}

/** Whether a tool failure waits to end the attempt, and which. */
export function heldToolFailure(ctx: RunContext): { err: unknown } | undefined {
  return toolFailures.has(ctx) ? { err: toolFailures.get(ctx) } : undefined;
}
