import { Counter, Gauge, Histogram, Registry } from 'prom-client';

// Agent runs last from a fraction of a second to many minutes.
const RUN_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];
// Queue wait is near zero on an idle pool and grows to minutes when a scope is at its cap.
const WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900];
// A wait lasts from a chat-ops click (seconds) to a sign-off over a weekend (days).
const WAIT_DURATION_BUCKETS = [1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600];
// API calls are Redis round trips: milliseconds; SSE streams stay open for the run's length.
const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120];

/**
 * The series Baton exports, defined once per registry: counters and histograms the process
 * adds to as things happen. Metrics (metrics.ts) builds on it with their labels and hooks;
 * the series read at scrape time are in metrics-scrape.ts.
 */
export class MetricSeries {
  readonly registry = new Registry();
  protected readonly scopeLabel: boolean;

  readonly submitted: Counter<string>;
  readonly started: Counter<string>;
  readonly finished: Counter<string>;
  readonly retries: Counter<string>;
  readonly recoveries: Counter<string>;
  readonly blocked: Counter<string>;
  readonly duration: Histogram<string>;
  readonly queueWait: Histogram<string>;
  readonly waitDuration: Histogram<string>;
  readonly memoHits: Counter<string>;
  readonly steering: Counter<string>;
  /** baton_live_notifications_total's two series, by kind (counted per notification heard). */
  readonly liveNotifications: Record<'publish' | 'spublish', Counter.Internal>;
  readonly memoMisses: Counter<string>;
  readonly tokens: Counter<string>;
  readonly modelTokens: Counter<string>;
  readonly budgetRefusals: Counter<string>;
  readonly appends: Counter<string>;
  readonly appendedEvents: Counter<string>;
  readonly sseClients: Gauge<string>;
  readonly http: Histogram<string>;
  readonly redisErrors: Counter<string>;
  readonly redisReconnects: Counter<string>;
  readonly collectErrors: Counter<string>;
  readonly schemaChecks: Counter<string>;
  readonly mcpRequests: Counter<string>;
  readonly mcpToolCalls: Counter<string>;
  readonly rateLimitWait: Histogram<string>;
  readonly rateLimitPauses: Counter<string>;
  readonly rateLimitLimit: Gauge<string>;
  readonly rateLimitBuckets: Gauge;
  readonly mcpCalls: Counter<string>;

  constructor(scopeLabel: boolean) {
    this.scopeLabel = scopeLabel;
    const registers = [this.registry];
    const run = this.scopeLabel ? ['runtime', 'agent', 'scope'] : ['runtime', 'agent'];
    const counter = (name: string, help: string, labelNames: string[]) => new Counter({ name, help, labelNames, registers });

    this.submitted = counter('baton_runs_submitted_total', 'Runs accepted by the API (idempotent replays not counted).', run);
    this.started = counter('baton_runs_started_total', 'Attempts a worker started (first attempts and retries; takeovers count as lease recoveries).', run);
    this.finished = counter('baton_runs_finished_total', 'Runs that reached a terminal status, by status.', [...run, 'status']);
    this.retries = counter('baton_run_retries_total', 'Attempts that failed transiently and were scheduled again.', run);
    this.recoveries = counter('baton_lease_recoveries_total', 'Runs taken over after their worker lost the lease (crash, pause, partition).', run);
    this.blocked = counter('baton_runs_blocked_total', 'Runs blocked on a non-idempotent step of unknown outcome (need an operator).', run);
    this.duration = new Histogram({
      name: 'baton_run_duration_seconds', help: 'From the first start of a run to its terminal status.',
      labelNames: [...run, 'status'], buckets: RUN_BUCKETS, registers,
    });
    this.queueWait = new Histogram({
      name: 'baton_run_queue_wait_seconds', help: 'From submit to the first start of a run (session order and scope cap included).',
      labelNames: run, buckets: WAIT_BUCKETS, registers,
    });
    this.waitDuration = new Histogram({
      name: 'baton_wait_duration_seconds',
      help: 'From a wait being reached to its end: resumed with a value, timed out, or (a sleep) over. Counted by the process that ended it.',
      labelNames: ['runtime', 'kind', 'outcome'], buckets: WAIT_DURATION_BUCKETS, registers,
    });
    this.memoHits = counter('baton_memo_hits_total', 'Memoized steps answered from an earlier attempt.', ['runtime', 'kind']);
    this.steering = counter('baton_steering_messages_total',
      'Steering messages (multitask steer) by outcome: pending (sent into a running turn), turn (no active run: it started one), ' +
      'delivered (taken at a boundary), not_delivered (a worker finished its run first: it became the next turn).', ['runtime', 'outcome']);
    const heard = counter('baton_live_notifications_total',
      'Notifications of new run events this process heard on the scope channels it follows, by how they were sent: ' +
      'publish (LIVE_PUBSUB=classic) or spublish (LIVE_PUBSUB=sharded).', ['kind']);
    this.liveNotifications = { publish: heard.labels('publish'), spublish: heard.labels('spublish') };
    // Both at 0 from the start: the kind that grows is the answer, so neither may be missing.
    for (const series of Object.values(this.liveNotifications)) series.inc(0);
    this.memoMisses = counter('baton_memo_misses_total', 'Memoized steps that had to run.', ['runtime', 'kind']);
    this.tokens = counter('baton_tokens_streamed_total', 'Token deltas written to run event logs.', run);
    // By the agent that made the call (a sub-agent's name too), not the runtime: usage is what
    // an agent costs. Counted by the worker that stored the call's step, so once per call made.
    this.modelTokens = counter('baton_model_tokens_total', 'Tokens of model calls as providers reported them, by kind (input, output).', ['kind', 'agent']);
    // The run's labels (runtime, agent; scope only with METRICS_SCOPE_LABEL), never a scope of its own:
    // which scopes are at their budget is what GET …/usage answers, per scope.
    this.mcpCalls = counter(
      'baton_mcp_calls_total',
      'Requests agents made to MCP servers (a memo hit makes none), by server, tool ((list), (connect), (ping) for the rest) and outcome: ok, error (the server or tool answered with one), unavailable (no answer).',
      ['agent', 'server', 'tool', 'outcome'],
    );
    this.budgetRefusals = counter(
      'baton_model_calls_refused_total',
      "Model calls refused before they were made by the scope's daily token budget, by what the run did: failed (BUDGET_EXCEEDED) or waiting (for the next UTC day).",
      [...run, 'action'],
    );
    this.appends = counter('baton_event_log_appends_total', 'Fenced append round trips to run event logs (coalesced token batches and notices).', run);
    this.appendedEvents = counter('baton_event_log_events_total', 'Events written to run event logs by those appends.', run);
    this.sseClients = new Gauge({
      name: 'baton_sse_clients', help: 'SSE clients connected to this API process.',
      labelNames: this.scopeLabel ? ['scope'] : [], registers,
    });
    this.http = new Histogram({
      name: 'baton_http_request_duration_seconds', help: 'HTTP requests by method, route template and status (SSE: the stream length).',
      labelNames: ['method', 'route', 'status'], buckets: HTTP_BUCKETS, registers,
    });
    this.redisErrors = counter('baton_redis_errors_total', 'Errors reported by a Redis connection (refused, reset, timeouts).', ['connection']);
    this.redisReconnects = counter('baton_redis_reconnects_total', 'Redis connections that came back after being lost.', ['connection']);
    this.collectErrors = counter('baton_metrics_collect_errors_total', 'Scrape-time collectors that failed (their series are left out of that scrape).', ['collector']);
    this.collectErrors.inc({ collector: 'queue_jobs' }, 0);
    this.collectErrors.inc({ collector: 'runs_waiting' }, 0);

    this.schemaChecks = counter(
      'baton_schema_checks_total',
      'Schema compiles (check) and validations (validate) by how they ended: passed, refused, or cut (budget, memory, crash, gone: the client went away, closed, unavailable).',
      ['op', 'outcome'],
    );

    // MCP (docs/mcp.md): a method label is one of MCP_METHODS or "_other", never a caller's string.
    this.mcpRequests = counter('baton_mcp_requests_total', 'JSON-RPC messages POSTed to /mcp, by method (notifications included).', ['method']);
    this.mcpToolCalls = counter(
      'baton_mcp_tool_calls_total',
      "MCP tools/call requests by mode (call: answered when the run ends; task: answered at once) and outcome: the run's end (completed, failed, cancelled), created (a task), refused, or left (the client went away first).",
      ['mode', 'outcome'],
    );

    // Provider rate limits. A bucket label is a name RATE_LIMITS defines (at most 100), never a caller's.
    this.rateLimitWait = new Histogram({
      name: 'baton_rate_limit_wait_seconds',
      help: 'How long model calls waited for a grant of their provider rate-limit bucket (0 when granted at once), by bucket.',
      labelNames: ['bucket'], buckets: WAIT_BUCKETS, registers,
    });
    this.rateLimitPauses = counter(
      'baton_rate_limit_pauses_total',
      "Pauses of a provider rate-limit bucket, by who paused it: a provider's 429 with Retry-After (counted by the worker whose call got it), or an operator.",
      ['bucket', 'by'],
    );
    this.rateLimitLimit = new Gauge({
      name: 'baton_rate_limit_limit', help: "A provider rate-limit bucket's limits (RATE_LIMITS), by unit: requests and tokens per 60 s window.",
      labelNames: ['bucket', 'unit'], registers,
    });
    // Unlabelled, so it reads 0 from the start: by it the dashboard tells a deployment without buckets apart from a failed scrape.
    this.rateLimitBuckets = new Gauge({
      name: 'baton_rate_limit_buckets', help: 'Provider rate-limit buckets RATE_LIMITS defines (0: model calls take no grant).', registers,
    });
  }
}
