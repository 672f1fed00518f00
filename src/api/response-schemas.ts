import { z } from 'zod';
import { ERROR_CODES, ON_BUDGET, PUBLIC_RUN_STATUSES, ROLES, WAIT_KINDS } from '../lib/contract/index.ts';

/**
 * Shapes of the API's answers, for /openapi.json: the contract's types (src/lib/contract)
 * as zod schemas. test/contract-types.test.ts pins each one to its type, and the presenters
 * are typed with the contract, so the document, the answers and the client agree.
 */

const iso = z.string().describe('ISO 8601 time');
const publicStatus = z.enum(PUBLIC_RUN_STATUSES);

export const errorResponse = z.object({
  error: z.object({
    code: z.enum(Object.keys(ERROR_CODES) as [keyof typeof ERROR_CODES, ...(keyof typeof ERROR_CODES)[]]),
    message: z.string(),
    details: z.array(z.object({ path: z.string(), message: z.string() })),
  }),
});

export const streamTokenResponse = z.object({
  token: z.string().describe('pass as `?access_token=` on the events route'),
  expiresAt: iso.describe('after this, the token opens no new connection'),
  runId: z.string().optional().describe('the run whose events it opens'),
  sessionId: z.string().optional().describe('the session whose runs’ events it opens'),
});

export const usageTotals = z.object({
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  totalTokens: z.number().int(),
  modelCalls: z.number().int(),
});

export const runResponse = z.object({
  id: z.string(),
  scope: z.string(),
  sessionId: z.string(),
  runtime: z.string(),
  agent: z.string(),
  status: publicStatus,
  attempt: z.number().int(),
  maxAttempts: z.number().int(),
  recoveries: z.number().int(),
  createdAt: iso,
  updatedAt: iso,
  startedAt: iso.optional(),
  finishedAt: iso.optional(),
  retryAt: iso.optional(),
  cancelRequested: z.boolean().optional(),
  input: z.object({
    content: z.string(),
    artifacts: z.array(z.object({ id: z.string(), disposition: z.enum(['inline', 'reference']).optional() })).optional(),
  }),
  metadata: z.record(z.string(), z.unknown()).optional(),
  idempotencyKey: z.string().optional(),
  lastError: z.object({ code: z.string(), message: z.string(), details: z.unknown().optional() }).optional(),
  blocked: z.object({ stepKey: z.string(), reason: z.string(), since: iso }).optional(),
  waits: z.array(z.object({
    key: z.string().describe('wait:<name>:<n>'),
    kind: z.enum(WAIT_KINDS),
    name: z.string(),
    prompt: z.unknown().optional(),
    schema: z.record(z.string(), z.unknown()).optional(),
    since: iso,
    expiresAt: iso.optional(),
    token: z.string().optional().describe('resumes this wait once with POST /v1/waits/{token}, no key needed'),
  })).optional(),
  runAt: iso.optional(),
  ttlMs: z.number().int().optional(),
  timeoutMs: z.number().int().optional(),
  priority: z.number().int().optional().describe('0-9; absent: 5'),
  concurrencyKey: z.string().optional(),
  onBudget: z.enum(ON_BUDGET).optional().describe('a model call past the scope\'s daily token budget: fail (absent) or wait for the next UTC day'),
  result: z
    .object({
      answer: z.string(), finishReason: z.string(), toolCallsSeen: z.number().int(), payload: z.unknown().optional(),
      usage: usageTotals.optional().describe('every model call of the run, in any attempt, counted once'),
    })
    .optional(),
  rerunOf: z.string().optional().describe('a re-run: the run it repeats'),
  rerunFrom: z.string().optional().describe('a re-run: the step it was re-run from (absent: the start)'),
  rerunNonIdempotent: z.array(z.string()).optional().describe('a re-run: the non-idempotent steps it runs again'),
  reruns: z.array(z.string()).max(10).optional().describe('the newest re-runs of this run (at most 10), oldest first; GET …/runs?rerunOf=<id> lists every one'),
  rerunCount: z.number().int().optional().describe('how many re-runs this run has had in all'),
  links: z.object({ self: z.string(), events: z.string() }),
  /** Submit only: e.g. that no live worker serves the runtime yet. */
  warnings: z.array(z.string()).optional(),
  /** Submit only, when asked: a token for this run's events. */
  streamToken: streamTokenResponse.optional(),
  /** Submit with multitask steer only: the message and what became of it (docs/steering.md). */
  steering: z.object({
    messageId: z.string(),
    runId: z.string().describe('the run the message went to (pending, delivered, not-delivered) or became (turn)'),
    outcome: z.enum(['pending', 'delivered', 'not-delivered', 'turn']),
    step: z.number().int().optional().describe('delivered: the boundary it was taken at'),
    reason: z.string().optional().describe('not-delivered: the status the run ended with first'),
    turnRunId: z.string().optional().describe('not-delivered: the run the message became, queued next in the session'),
  }).optional(),
});

/** POST …/artifacts: the stored artifact, to name in a submit's input.artifacts. */
export const artifactResponse = z.object({
  id: z.string(),
  contentType: z.string(),
  size: z.number().int(),
  createdAt: iso,
});

export const runListResponse = z.object({ runs: z.array(runResponse), nextCursor: z.string().nullable() });

/** POST …/sessions/{sessionId}/fork: the new session and what was copied into it. */
export const sessionForkResponse = z.object({
  sessionId: z.string(),
  forkedFrom: z.string(),
  turns: z.number().int(),
  messages: z.number().int(),
  atRunId: z.string(),
});

export const messagesResponse = z.object({
  messages: z.array(
    z.object({
      role: z.enum(['user', 'assistant']),
      content: z.string(),
      runId: z.string(),
      createdAt: z.number(),
      incomplete: z.boolean().optional(),
    }),
  ),
  nextCursor: z.string().nullable(),
});

export const runtimesResponse = z.object({
  runtimes: z.array(
    z.object({
      runtimeId: z.string(),
      liveWorkers: z.number().int(),
      agents: z.array(z.string()),
      concurrency: z.number().int(),
      lastSeenAt: iso,
      draining: z.boolean(),
    }),
  ),
});

export const statsResponse = z.object({
  scope: z.string(),
  runtimeId: z.string(),
  counts: z.object({
    scheduled: z.number().int(),
    queued: z.number().int(),
    running: z.number().int(),
    retrying: z.number().int(),
    waiting: z.number().int(),
    blocked: z.number().int(),
    succeeded: z.number().int().describe('cumulative'),
    failed: z.number().int().describe('cumulative'),
    cancelled: z.number().int().describe('cumulative'),
    expired: z.number().int().describe('cumulative'),
  }),
  oldestQueuedAgeMs: z.number().int().nullable(),
  draining: z.boolean(),
  liveWorkers: z.number().int(),
  unservedAgents: z.array(z.object({ agent: z.string(), runs: z.number().int(), oldestAgeMs: z.number().int() }))
    .describe('agents of waiting runs that no live worker serves (among the 1,000 oldest waiting runs)'),
});

export const drainResponse = z.object({
  scope: z.string(),
  runtimeId: z.string(),
  draining: z.literal(true),
  cancelled: z.number().int(),
});

export const resumeResponse = z.object({
  scope: z.string(),
  runtimeId: z.string(),
  draining: z.literal(false),
  resumed: z.number().int(),
});

export const healthResponse = z.object({ ok: z.boolean() }).catchall(z.unknown());

export const sseStream = z.string().describe(
  'text/event-stream: `id`, `event` (status | attempt | token | ephemeral | tool-call | tool-result | data | end), `data` (JSON)',
);

export const stepsResponse = z.object({
  steps: z.array(
    z.object({
      key: z.string().describe('<kind>:<name>:<n>'),
      kind: z.enum(['step', 'infer', 'tool', 'wait']),
      name: z.string(),
      n: z.number().int().describe('the n-th call of this name in the run'),
      status: z.enum(['done', 'started']).describe('started: a non-idempotent step began and stored no result'),
      value: z.unknown().optional(),
      streamed: z.string().optional().describe('text an inference streamed'),
      timedOut: z.boolean().optional().describe('a wait that timed out'),
      startedAt: iso.optional(),
      finishedAt: iso.optional(),
    }),
  ),
  nextCursor: z.string().nullable().describe('set when more steps follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`'),
});

export const waitResumedResponse = z.object({ runId: z.string(), waitKey: z.string(), resumed: z.literal(true) });

export const whoamiResponse = z.object({
  scope: z.string().nullable().describe('null for an operator key, bound to no scope'),
  role: z.enum(ROLES),
  keyId: z.string(),
});

const limitValues = z.object({
  maxActive: z.number().int(),
  maxActivePerKey: z.number().int().nullable().describe('null: no per-key cap'),
  submitRatePerSec: z.number().describe('0: no submit rate limit'),
  submitBurst: z.number().int(),
  weight: z.number().int(),
  maxStreams: z.number().int().describe('per API process'),
  tokensPerDay: z.number().int().nullable().describe('null: no daily token budget'),
  readBytesPerSec: z.number().int().describe('bytes a second of costly reads past READ_FREE_BYTES each; 0: no read budget'),
  readBurstBytes: z.number().int(),
  maxQueuedRuns: z.number().int().nullable().describe('null: no cap on runs queued and not started'),
  maxStoredBytes: z.number().int().nullable().describe('null: no cap on stored bytes'),
  forksPerMinute: z.number().int().nullable().describe('null: no cap on forks a minute'),
  forkBytesPerMinute: z.number().int().nullable().describe('null: no cap on bytes forked a minute'),
  retentionMs: z.number().int().describe('ms a finished run stays readable'),
});

export const limitsResponse = z.object({
  scope: z.string(),
  limits: limitValues.describe('the value in force of every limit'),
  set: limitValues.partial().describe("the operator's overrides only; a field absent takes its default"),
  defaults: limitValues.describe('the configured defaults'),
  inUse: z.object({
    active: z.number().int().describe('runs of the scope dispatched or running'),
    parked: z.number().int().describe('runnable runs held back by a limit'),
    share: z.number().int().nullable().describe("the scope's fair share of the workers' slots while scopes contend for them (ceil(level × weight)); null when they do not"),
    streams: z.number().int().describe('event streams of the scope open on the API process that answered'),
    tokensToday: z.number().int().describe('model tokens the scope used today (UTC), what tokensPerDay is checked against'),
    readBytesLeft: z.number().int().describe("bytes the scope's read bucket holds now; below 0 its costly reads are refused"),
    queuedRuns: z.number().int().describe('runs queued or dispatched, not started: what maxQueuedRuns is checked against'),
    storedBytes: z.number().int().describe('bytes the scope stores, what maxStoredBytes is checked against'),
  }),
});

export const usageResponse = z.object({
  scope: z.string(),
  from: z.string().describe('YYYY-MM-DD (UTC)'),
  to: z.string().describe('YYYY-MM-DD (UTC), inclusive'),
  rows: z.array(usageTotals.extend({ day: z.string(), agent: z.string(), model: z.string() })),
  total: usageTotals.describe("the sum of this page's rows (the range's when it is the only page)"),
  nextCursor: z.string().nullable().describe('set when more rows follow (the page stopped on `limit` or PAGE_MAX_BYTES): pass it as `cursor`'),
  budget: z.object({
    tokensPerDay: z.number().int(),
    usedToday: z.number().int().describe('input and output tokens of the scope counted today (UTC)'),
    left: z.number().int().describe('tokensPerDay - usedToday, never below 0'),
    resetsAt: iso.describe('the next UTC midnight'),
  }).nullable().describe("the scope's daily token budget today, whatever from and to are; null: none"),
});

export const runUsageResponse = z.object({
  runId: z.string(),
  total: usageTotals.describe('every model call of the run so far, in any attempt, counted once'),
  models: z.array(usageTotals.extend({
    model: z.string(),
    costUsd: z.number().optional().describe('by MODEL_PRICES, when it prices this model'),
  })).describe('the same calls by model'),
  costUsd: z.number().optional().describe('by MODEL_PRICES, when it is set and prices every model the run called'),
  unpriced: z.array(z.string()).optional().describe('models the run called that MODEL_PRICES has no price for'),
});

export const rateLimitBucketResponse = z.object({
  bucket: z.string(),
  rpm: z.number().int().nullable().describe('requests a minute (RATE_LIMITS); null: not limited'),
  tpm: z.number().int().nullable().describe('tokens a minute (RATE_LIMITS); null: not limited'),
  requests: z.number().int().describe('grants in the window now'),
  tokens: z.number().int().describe('their tokens: as settled with the usage reported, or reserved by calls in flight'),
  reservedTokens: z.number().int().describe('the part of tokens still reserved by calls in flight'),
  burst: z.number().int().describe("seconds' share of the minute granted in any one second (the bucket's burst:, else RATE_LIMIT_BURST)"),
  perSecond: z.object({
    requests: z.number().int().nullable().describe('ceil(rpm / 60) x burst; null: no rpm'),
    tokens: z.number().int().nullable().describe('ceil(tpm / 60) x burst; null: no tpm'),
  }).describe('the spread: the most the bucket grants in any one second'),
  lastSecond: z.object({
    requests: z.number().int(),
    tokens: z.number().int(),
  }).describe('grants of the last second and their tokens'),
  waiting: z.object({
    count: z.number().int().describe('scopes waiting for the bucket now'),
    scopes: z.array(z.string()).describe('the first 20 of them, next served first (by weight, in start-time fair order)'),
  }),
  paused: z.object({
    by: z.enum(['provider', 'operator']).describe("a provider's 429 with Retry-After, or an operator"),
    untilMs: z.number().int().nullable().describe('epoch ms; null: until an operator resumes it'),
    sinceMs: z.number().int().nullable().describe('epoch ms the pause was set; null: not known (set by an earlier release)'),
    askedMs: z.number().int().nullable().describe("what the provider's Retry-After asked for, in ms; null: an operator's pause"),
    capped: z.boolean().describe('the provider asked for longer than RATE_LIMIT_PAUSE_MAX_MS, and the pause ends at the cap'),
  }).nullable().describe('null: not paused'),
});

export const rateLimitsResponse = z.object({
  windowMs: z.number().int().describe('how long a grant counts in its bucket: the minute, and a second for the request to reach the provider'),
  providerPauseMaxMs: z.number().int().describe("the longest a provider's Retry-After pauses a bucket (RATE_LIMIT_PAUSE_MAX_MS)"),
  buckets: z.array(rateLimitBucketResponse),
});

/** POST …/chat and GET …/chat/{chatId}/stream: the AI SDK's UI message stream. */
export const uiMessageStream = z.string().describe(
  'text/event-stream in the AI SDK\'s UI message stream protocol (header x-vercel-ai-ui-message-stream: v1): ' +
  '`id` (the Baton event id), `data` (a UIMessageChunk as JSON), ending with `data: [DONE]` (docs/chat-pages.md)',
);

/** GET …/chat/{chatId}/messages: the AI SDK's UIMessage[]. */
export const chatMessagesResponse = z.object({
  messages: z.array(z.object({
    id: z.string(),
    role: z.enum(['user', 'assistant']),
    metadata: z.object({ runId: z.string(), createdAt: z.number(), incomplete: z.literal(true).optional() }),
    parts: z.array(z.looseObject({ type: z.string() }))
      .describe("the SDK's UIMessage parts: text, and while the answer's events are retained, step-start, dynamic-tool and data-<name>"),
  })),
  nextCursor: z.string().nullable(),
});

/** POST …/chat/{chatId}/stop. */
export const chatStopResponse = z.object({
  stopped: z.boolean().describe('a turn was running and is cancelled (or was already ending)'),
  run: runResponse.optional(),
});
