/** Negative codes returned by the Lua scripts (see lua/lib.lua), mapped in one place. */
export const SCRIPT_CODES = {
  [-1]: 'NOT_FOUND',
  [-2]: 'LEASE_LOST',
  [-3]: 'NOT_RUNNABLE',
  [-4]: 'LEASE_HELD',
  [-5]: 'SESSION_BUSY',
  [-6]: 'DRAINING',
  [-8]: 'STEP_NOT_BLOCKED',
} as const;

export type ScriptCode = (typeof SCRIPT_CODES)[keyof typeof SCRIPT_CODES];

export function scriptCode(code: number): ScriptCode {
  const name = (SCRIPT_CODES as Record<number, ScriptCode>)[code];
  if (!name) throw new Error(`unknown script result code ${code}`);
  return name;
}

/** A fenced write was refused: this process no longer holds the run's lease. */
export class LeaseLostError extends Error {
  constructor(readonly runId: string) {
    super(`lease on run ${runId} was lost`);
    this.name = 'LeaseLostError';
  }
}
