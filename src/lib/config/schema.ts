import { z } from 'zod';
import { processVars } from './process.ts';
import { runVars } from './runs.ts';
import { limitVars } from './limits.ts';
import { storageVars } from './storage.ts';
import { operationVars } from './operations.ts';
import { httpVars } from './http.ts';
import { modelVars } from './models.ts';

/**
 * Every tunable of Baton, parsed once from the environment, frozen, and passed down.
 * Each default says why it is that value; change them with the env variable named
 * in the comment. The variables are grouped by area, one file each.
 */
export const configSchema = z.object({
  ...processVars,
  ...runVars,
  ...limitVars,
  ...storageVars,
  ...operationVars,
  ...httpVars,
  ...modelVars,
});

export type Config = Readonly<
  Omit<z.infer<typeof configSchema>, 'HEARTBEAT_MS'> & { HEARTBEAT_MS: number }
>;
