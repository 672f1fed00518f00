/**
 * Baton's configuration: every variable it reads from the environment, by area (process.ts,
 * runs.ts, limits.ts, storage.ts, operations.ts, http.ts, models.ts; RATE_LIMITS's grammar in
 * rate-limits.ts), put together in schema.ts and parsed once at start by loadConfig (load.ts).
 */
export { configSchema, type Config } from './schema.ts';
export { ConfigError, loadConfig, parseBootstrapKeys } from './load.ts';
export type { ModelPrice } from './models.ts';
