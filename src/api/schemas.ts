import { z } from 'zod';
import { ID_PATTERN } from '../lib/keys.ts';
import { RUN_STATUSES } from '../lib/engine/record.ts';

/** Request and response schemas: the single source for validation and /openapi.json. */

export const idSchema = z.string().regex(ID_PATTERN, 'must be 1-64 of A-Z a-z 0-9 . _ - and start with a letter or digit');

export const scopeParams = z.strictObject({ scope: idSchema });
export const runParams = z.strictObject({ scope: idSchema, runId: idSchema });
export const sessionParams = z.strictObject({ scope: idSchema, sessionId: idSchema });
export const stepParams = z.strictObject({
  scope: idSchema,
  runId: idSchema,
  stepKey: z.string().regex(/^(step|infer|tool):[A-Za-z0-9][A-Za-z0-9._-]{0,63}:\d{1,6}$/, 'must be <kind>:<name>:<n>'),
});

/** Metadata: a flat-ish JSON object, bounded so a run record stays small. */
const metadataSchema = z
  .record(z.string().max(64), z.unknown())
  .refine((m) => Object.keys(m).length <= 64, 'at most 64 keys')
  .refine((m) => JSON.stringify(m).length <= 16_384, 'at most 16 KiB as JSON');

export const MAX_CONTENT_CHARS = 256 * 1024;

export const submitBody = z.strictObject({
  sessionId: idSchema,
  input: z.strictObject({ content: z.string().min(1).max(MAX_CONTENT_CHARS) }),
  runtime: idSchema.default('default'),
  agent: idSchema.default('echo'),
  metadata: metadataSchema.optional(),
  /** Caller memory: any JSON value but null (checked separately for its own error code). */
  memory: z.unknown().optional(),
  maxAttempts: z.number().int().min(1).max(100).optional(),
  idempotencyKey: z.string().regex(/^[\x21-\x7e]{1,128}$/, 'printable ASCII, 1-128 chars').optional(),
  multitask: z.enum(['enqueue', 'reject', 'interrupt']).default('enqueue'),
  outputSchema: z.record(z.string(), z.unknown()).optional(),
});
export type SubmitBody = z.infer<typeof submitBody>;

export const listRunsQuery = z.strictObject({
  sessionId: idSchema.optional(),
  status: z
    .string()
    .transform((s) => s.split(','))
    .pipe(z.array(z.enum(RUN_STATUSES)))
    .optional(),
  agent: idSchema.optional(),
  runtime: idSchema.optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  /** The previous page's nextCursor: `<creation ms>_<run id>` of its last run. */
  cursor: z.string().regex(/^\d{1,16}_[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be a nextCursor from an earlier page').optional(),
});

export const messagesQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  cursor: z.string().regex(/^\d{1,9}$/).transform(Number).optional(),
});

export const eventsQuery = z.strictObject({
  after: z.string().regex(/^(0|\d{1,20}-\d{1,20})$/, 'must be a stream id <ms>-<seq>').optional(),
});

export const lastEventIdHeader = z.string().regex(/^\d{1,20}-\d{1,20}$/, 'must be a stream id <ms>-<seq>');

export const resolveBody = z.union([
  z.strictObject({ value: z.unknown().refine((v) => v !== undefined, 'value is required') }),
  z.strictObject({ rerun: z.literal(true) }),
]);

export const emptyBody = z.strictObject({});

/** For routes that take no query parameters: any parameter is an unknown field. */
export const emptyQuery = z.strictObject({});

export const runtimeParams = z.strictObject({ scope: idSchema, runtimeId: idSchema });

/** POST …/drain: `cancelQueued` also cancels the runs waiting to start (default: they wait). */
export const drainBody = z.strictObject({ cancelQueued: z.boolean().default(false) });

/** `Authorization: Bearer <key>`: keys are printable ASCII without spaces, 16-256 chars. */
export const authorizationHeader = z.string().regex(/^Bearer [\x21-\x7e]{16,256}$/, 'must be "Bearer <API key>"');
