import { z } from 'zod';

/** A duration or count in ms from the environment: a non-negative integer, `def` when unset. */
export const intMs = (def: number) => z.coerce.number().int().nonnegative().default(def);

/** A switch from the environment: true/false or 1/0, `def` when unset. */
export const bool = (def: boolean) =>
  z
    .enum(['true', 'false', '1', '0'])
    .default(def ? 'true' : 'false')
    .transform((v) => v === 'true' || v === '1');
