/**
 * The public shapes of Baton's HTTP API, written once and free of runtime dependencies:
 * the API's zod schemas, its presenters, the typed client and the SDK derive from them or
 * are pinned to them by test/contract-types.test.ts.
 */
export * from './ids.ts';
export * from './runs.ts';
export * from './events.ts';
export * from './errors.ts';
export * from './admin.ts';
export * from './schedules.ts';
export * from './operations.ts';
