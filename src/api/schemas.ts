import { z } from 'zod';
import {
  ID_PATTERN, ID_RULE, MULTITASK_STRATEGIES, ON_BUDGET, RUN_STATUSES, STEERING_ID_PATTERN, STEP_KEY_PATTERN, STREAM_ID_PATTERN,
  WAIT_KEY_PATTERN, WAIT_TOKEN_PATTERN,
} from '../lib/contract/index.ts';
import { limitOverrides } from '../lib/tenancy/limits.ts';
import { BUCKET_NAME } from '../lib/config/rate-limits.ts';
import { MAX_PAUSE_MS, MIN_PAUSE_MS } from '../lib/engine/flow/rate-limiter.ts';

/**
 * Request schemas: the validation of every route and the source of /openapi.json. The
 * shapes are the contract's (src/lib/contract); test/contract-types.test.ts pins each
 * schema to its contract type, so neither can drift from the other.
 */

export const idSchema = z.string().regex(ID_PATTERN, ID_RULE);

export const scopeParams = z.strictObject({ scope: idSchema });
export const runParams = z.strictObject({ scope: idSchema, runId: idSchema });
export const sessionParams = z.strictObject({ scope: idSchema, sessionId: idSchema });
export const stepParams = z.strictObject({
  scope: idSchema,
  runId: idSchema,
  stepKey: z.string().regex(STEP_KEY_PATTERN, 'must be <kind>:<name>:<n>'),
});

/** Metadata: a flat-ish JSON object, bounded so a run record stays small. */
const metadataSchema = z
  .record(z.string().max(64), z.unknown())
  .refine((m) => Object.keys(m).length <= 64, 'at most 64 keys')
  .refine((m) => JSON.stringify(m).length <= 16_384, 'at most 16 KiB as JSON');

export const MAX_CONTENT_CHARS = 256 * 1024;

/** At most this many artifacts per submit: each inline one is held in the worker's memory while the run lasts. */
export const MAX_ARTIFACTS_PER_RUN = 16;

/** input.artifacts: ids from POST …/artifacts of the same scope, each at most once. */
const attachmentsSchema = z
  .array(z.strictObject({ id: idSchema, disposition: z.enum(['inline', 'reference']).optional() }))
  .max(MAX_ARTIFACTS_PER_RUN)
  .refine((list) => new Set(list.map((a) => a.id)).size === list.length, 'each artifact at most once');

/** A concurrency key: an end user, an organisation (it names Redis keys of the scope, so no braces or spaces). */
const CONCURRENCY_KEY_PATTERN = /^[A-Za-z0-9_.:@+-]{1,128}$/;

/** Delays, time-to-live and budgets up to a year: beyond that a value is more likely a unit mistake than a plan. */
export const MAX_SCHEDULE_MS = 366 * 24 * 3600_000;
const durationMs = (min: number) => z.number().int().min(min).max(MAX_SCHEDULE_MS);

export const submitBody = z.strictObject({
  sessionId: idSchema,
  input: z.strictObject({ content: z.string().min(1).max(MAX_CONTENT_CHARS), artifacts: attachmentsSchema.optional() }),
  runtime: idSchema.default('default'),
  agent: idSchema.default('echo'),
  metadata: metadataSchema.optional(),
  /** Caller memory: any JSON value but null (checked separately for its own error code). */
  memory: z.unknown().optional(),
  maxAttempts: z.number().int().min(1).max(100).optional(),
  idempotencyKey: z.string().regex(/^[\x21-\x7e]{1,128}$/, 'printable ASCII, 1-128 chars').optional(),
  multitask: z.enum(MULTITASK_STRATEGIES).default('enqueue'),
  messageId: z.string().regex(STEERING_ID_PATTERN, 'letters, digits and . _ : -, 1-128 chars, starting with a letter or digit').optional()
    .describe('multitask steer: the message\'s id; a resend with the same id answers the first outcome'),
  outputSchema: z.record(z.string(), z.unknown()).optional(),
  streamToken: z.boolean().optional(),
  runAt: z.iso.datetime({ offset: true }).optional(),
  delayMs: durationMs(0).optional(),
  ttlMs: durationMs(1).optional(),
  timeoutMs: durationMs(1).optional(),
  priority: z.number().int().min(0).max(9).optional(),
  concurrencyKey: z.string().regex(CONCURRENCY_KEY_PATTERN, 'letters, digits and _ . : @ + -, 1-128 chars').optional(),
  /** No default here: a request without it hashes (idempotency) as before it existed. */
  onBudget: z.enum(ON_BUDGET).optional(),
  awaitAgent: z.boolean().optional()
    .describe('queue the run even if no worker of the runtime offered its agent in the last day (else 422 UNKNOWN_AGENT)'),
}).superRefine((b, ctx) => {
  if (b.runAt !== undefined && b.delayMs !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['delayMs'], message: 'give runAt or delayMs, not both' });
  }
  if (b.runAt !== undefined && Date.parse(b.runAt) - Date.now() > MAX_SCHEDULE_MS) {
    ctx.addIssue({ code: 'custom', path: ['runAt'], message: 'at most a year ahead' });
  }
  // A delayed run joins its session when due, so there is no busy session to reject or interrupt at submit.
  if ((b.runAt !== undefined || b.delayMs !== undefined) && b.multitask !== 'enqueue') {
    ctx.addIssue({ code: 'custom', path: ['multitask'], message: 'a delayed run (runAt, delayMs) queues in its session: only enqueue' });
  }
  if (b.messageId !== undefined && b.multitask !== 'steer') {
    ctx.addIssue({ code: 'custom', path: ['messageId'], message: 'a message id is for multitask steer only' });
  }
  // A steering message is text delivered into a running turn; its id is its idempotency key,
  // and the run it may become is made when its run ends, with no start deadline of its own.
  if (b.multitask === 'steer') {
    if (b.idempotencyKey !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['idempotencyKey'], message: 'not with multitask steer: messageId makes a resend safe' });
    }
    if (b.ttlMs !== undefined) ctx.addIssue({ code: 'custom', path: ['ttlMs'], message: 'not with multitask steer: the message may become a later turn' });
    if (b.input.artifacts?.length) ctx.addIssue({ code: 'custom', path: ['input', 'artifacts'], message: 'a steering message carries text only' });
  }
});
export type SubmitBody = z.infer<typeof submitBody>;

/** POST …/runs/{runId}/rerun: where to re-run from, and what to change (reruns.ts). */
export const rerunBody = z.strictObject({
  fromStep: z.string().regex(STEP_KEY_PATTERN, 'must be <kind>:<name>:<n>').optional(),
  allowNonIdempotent: z.boolean().optional(),
  input: z.strictObject({ content: z.string().min(1).max(MAX_CONTENT_CHARS), artifacts: attachmentsSchema.optional() }).optional(),
  metadata: metadataSchema.optional(),
  /** Caller memory: any JSON value but null (checked separately for its own error code). */
  memory: z.unknown().optional(),
  maxAttempts: z.number().int().min(1).max(100).optional(),
  timeoutMs: durationMs(1).optional(),
  priority: z.number().int().min(0).max(9).optional(),
  idempotencyKey: z.string().regex(/^[\x21-\x7e]{1,128}$/, 'printable ASCII, 1-128 chars').optional(),
  awaitAgent: submitBody.shape.awaitAgent,
});

/** POST …/sessions/{sessionId}/fork: atTurn or atRunId, and the new session's id. */
export const forkBody = z.strictObject({
  atTurn: z.number().int().min(1).max(1_000_000).optional(),
  atRunId: idSchema.optional(),
  sessionId: idSchema.optional(),
}).refine((b) => (b.atTurn === undefined) !== (b.atRunId === undefined), { message: 'give atTurn or atRunId, one of them', path: ['atTurn'] });

export const listRunsQuery = z.strictObject({
  sessionId: idSchema.optional(),
  status: z
    .string()
    .transform((s) => s.split(','))
    .pipe(z.array(z.enum(RUN_STATUSES)))
    .optional(),
  agent: idSchema.optional(),
  runtime: idSchema.optional(),
  /** The re-runs of this run (its GET names the newest few). */
  rerunOf: idSchema.optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  /** The previous page's nextCursor: `<creation ms>_<run id>` of its last run. */
  cursor: z.string().regex(/^\d{1,16}_[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be a nextCursor from an earlier page').optional(),
});

export const messagesQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  cursor: z.string().regex(/^\d{1,9}$/).transform(Number).optional(),
});

/** GET …/runs/{runId}/steps: a page of steps; `cursor` is the previous page's nextCursor. */
export const stepsQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(1000).default(1000),
  cursor: z.string().regex(/^\d{1,9}$/, 'must be a nextCursor from an earlier page').transform(Number).optional(),
});

/** `0` (from the start) or a stream id. */
const STREAM_ID_OR_START = new RegExp(`^(0|${STREAM_ID_PATTERN.source.slice(1, -1)})$`);

export const eventsQuery = z.strictObject({
  after: z.string().regex(STREAM_ID_OR_START, 'must be a stream id <ms>-<seq>').optional(),
  /** A stream token, for readers that cannot send Authorization (a browser's EventSource); checked before parsing. */
  access_token: z.string().describe('a stream token (POST …/stream-token), instead of an API key').optional(),
});

export const lastEventIdHeader = z.string().regex(STREAM_ID_PATTERN, 'must be a stream id <ms>-<seq>');

export const resolveBody = z.union([
  z.strictObject({ value: z.unknown().refine((v) => v !== undefined, 'value is required') }),
  z.strictObject({ rerun: z.literal(true) }),
]);

/** A wait of a run: `wait:<name>:<n>` as the run's `waits` names it. */
export const waitParams = z.strictObject({
  scope: idSchema,
  runId: idSchema,
  waitKey: z.string().regex(WAIT_KEY_PATTERN, 'must be wait:<name>:<n>'),
});

export const waitTokenParams = z.strictObject({ token: z.string().regex(WAIT_TOKEN_PATTERN, 'must be a resume token (bwt_…)') });

/** The value a wait is resumed with: any JSON (an approval's is `{approved, reason?}`); the wait's schema checks it. */
export const waitResumeBody = z.strictObject({
  value: z.unknown().refine((v) => v !== undefined, 'value is required'),
});

export const emptyBody = z.strictObject({});

/** For routes that take no query parameters: any parameter is an unknown field. */
export const emptyQuery = z.strictObject({});

/**
 * Content-Type of an artifact upload, kept as sent: printable ASCII, no longer than a header
 * a client would really send. Absent: application/octet-stream.
 */
export const artifactContentType = z.string().regex(/^[\x20-\x7e]{1,255}$/, 'printable ASCII, at most 255 characters');

export const runtimeParams = z.strictObject({ scope: idSchema, runtimeId: idSchema });

/** POST …/drain: `cancelQueued` also cancels the runs waiting to start (default: they wait). */
export const drainBody = z.strictObject({ cancelQueued: z.boolean().default(false) });

/** Days a usage query may span: a year, leap day included; one hash read per day. */
export const MAX_USAGE_DAYS = 366;

const DAY_MS = 86_400_000;

/** A calendar day, YYYY-MM-DD (UTC): `2024-02-30` is refused, not read as March 1st. */
const daySchema = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a day YYYY-MM-DD')
  .refine((d) => !Number.isNaN(Date.parse(d)) && new Date(Date.parse(d)).toISOString().startsWith(d), 'must be a calendar day');

/** GET …/usage: from and to inclusive, to not before from, at most MAX_USAGE_DAYS days. */
export const usageQuery = z.strictObject({
  from: daySchema,
  to: daySchema,
  limit: z.coerce.number().int().min(1).max(10_000).default(10_000),
  /** The previous page's nextCursor: `<YYYY-MM-DD>.<row of that day>`. */
  cursor: z
    .string()
    .regex(/^\d{4}-\d{2}-\d{2}\.\d{1,9}$/, 'must be a nextCursor from an earlier page')
    .refine((c) => daySchema.safeParse(c.slice(0, 10)).success, 'must be a nextCursor from an earlier page')
    .optional(),
}).superRefine((q, ctx) => {
  const days = (Date.parse(q.to) - Date.parse(q.from)) / DAY_MS + 1;
  if (days < 1) ctx.addIssue({ code: 'custom', path: ['to'], message: 'must be the first day or a later one' });
  else if (days > MAX_USAGE_DAYS) ctx.addIssue({ code: 'custom', path: ['to'], message: `the range may span at most ${MAX_USAGE_DAYS} days` });
});

/** PUT …/limits: the scope's overrides, each in its range (src/lib/tenancy/limits.ts); a field absent takes its default. */
export const limitsBody = limitOverrides;

/** …/rate-limits/{bucket}/…: a bucket's name as RATE_LIMITS gives it (percent-encode a `/` in it). */
export const bucketParams = z.strictObject({ bucket: z.string().regex(BUCKET_NAME, 'must be a bucket name (letters, digits, . _ : / -)') });

/** POST …/rate-limits/{bucket}/pause: until a time (epoch ms), for a while, or (neither) until resumed. */
export const ratePauseBody = z.strictObject({
  untilMs: z.number().int().positive().optional().describe('epoch ms, at least a second ahead, within 366 days'),
  forMs: z.number().int().min(MIN_PAUSE_MS).max(MAX_PAUSE_MS).optional(),
}).refine((b) => b.untilMs === undefined || b.forMs === undefined, { message: 'give untilMs or forMs, not both', path: ['forMs'] });

/** `Authorization: Bearer <key>`: keys are printable ASCII without spaces, 16-256 chars. */
export const authorizationHeader = z.string().regex(/^Bearer [\x21-\x7e]{16,256}$/, 'must be "Bearer <API key>"');

/** For routes that take no path parameters. */
export const emptyParams = z.strictObject({});

/** …/chat/{chatId}/…: a chat is a session, `chatId` its id. */
export const chatParams = z.strictObject({ scope: idSchema, chatId: idSchema });

/**
 * A part of a UIMessage the page sends (the AI SDK's `UIMessage.parts`): only text parts and
 * tool parts carrying an approval answer are read; any other part is passed over, bounded.
 */
const chatPart = z.looseObject({
  type: z.string().max(128),
  text: z.string().max(MAX_CONTENT_CHARS).optional(),
  state: z.string().max(64).optional(),
  approval: z.looseObject({
    id: z.string().max(256), approved: z.boolean().optional(), reason: z.string().max(4096).optional(),
  }).optional(),
});

/** GET …/chat/{chatId}/stream: a stream token instead of a key. */
export const chatStreamQuery = z.strictObject({
  access_token: z.string()
    .describe('a stream token of the chat\'s session (POST …/sessions/{sessionId}/stream-token), instead of an API key').optional(),
});

/** GET …/chat/{chatId}/messages: a page of messages, and a stream token instead of a key. */
export const chatMessagesQuery = messagesQuery.extend({ access_token: chatStreamQuery.shape.access_token });

/** A UIMessage as `DefaultChatTransport` sends it. */
const chatMessage = z.looseObject({
  id: z.string().max(256),
  role: z.enum(['system', 'user', 'assistant']),
  parts: z.array(chatPart).max(1000),
});

/**
 * POST …/chat: the body `DefaultChatTransport` (package `ai`, HttpChatTransport.sendMessages)
 * sends, plus the `body` fields a page adds: which agent and runtime, and the run's metadata.
 * Only the last message is read (the session's history is Baton's, not the page's).
 */
export const chatBody = z.strictObject({
  id: idSchema,
  messages: z.array(chatMessage).min(1).max(10_000),
  trigger: z.enum(['submit-message', 'regenerate-message']),
  messageId: z.string().max(256).optional(),
  runtime: idSchema.default('default'),
  agent: idSchema.default('echo'),
  metadata: metadataSchema.optional(),
  maxAttempts: z.number().int().min(1).max(100).optional(),
});
export type ChatBody = z.infer<typeof chatBody>;
