import { createHash, timingSafeEqual } from 'node:crypto';
import type { JobType } from 'bullmq';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { HELD_BY, type HeldBack } from '../engine/fair-share.ts';
import type { MemoEvents } from '../engine/context.ts';
import type { ExecutorEvents } from '../engine/executor.ts';
import type { ConnectionEvents } from '../redis.ts';
import type { RunRecord } from '../engine/record.ts';
import type { AnsweredWait } from '../engine/transitions.ts';
import { TERMINAL_STATUSES, WAIT_KINDS, type TerminalStatus, type WaitKind } from '../contract/runs.ts';
import { withTimeout } from '../timeout.ts';
import type { RateLimits } from '../rate-limit-config.ts';
import type { BucketState, RateLimitEvents } from '../engine/rate-limiter.ts';
import type { SchemaGuardEvents } from '../engine/schema-guard.ts';

/** BullMQ job states exported per runtime queue (completed jobs are removed at once, see dispatcher.ts). */
export const QUEUE_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'failed'] as const satisfies readonly JobType[];

/** Reads a runtime queue's job counts by state (Dispatcher.queue(runtime).getJobCounts). */
export type QueueCounter = (runtime: string) => Promise<Record<string, number>>;

/** Reads how many runs of a runtime wait, by kind of wait, over every scope (ops/waiting-runs.ts). */
export type WaitingCounter = (runtime: string) => Promise<Record<WaitKind, number>>;

/** How a wait stopped pending: a value arrived, its timeout passed, or (a sleep) its time was up. */
export type WaitOutcome = 'resumed' | 'timed_out' | 'slept';

export interface MetricsOptions {
  /** METRICS_SCOPE_LABEL: add `scope` to run metrics (one series per tenant: opt in). */
  scopeLabel: boolean;
  /** METRICS_LABEL_LIMIT: distinct runtime / agent values kept before folding into "_other". */
  labelLimit: number;
  /** Process metrics (process_*, nodejs_*); off only for registries a test inspects alone. */
  defaultMetrics?: boolean;
  /** How long a scrape waits for Redis to count a queue's jobs. */
  collectTimeoutMs?: number;
}

/** The MCP methods /mcp answers or takes, each its own label value of baton_mcp_requests_total. */
export const MCP_METHODS = [
  'initialize', 'notifications/initialized', 'ping', 'tools/list', 'tools/call',
  'tasks/get', 'tasks/result', 'tasks/list', 'tasks/cancel', 'notifications/cancelled',
] as const;

/** Label value standing for every runtime or agent past the label limit. */
export const OTHER = '_other';

// Agent runs last from a fraction of a second to many minutes.
const RUN_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];
// Queue wait is near zero on an idle pool and grows to minutes when a scope is at its cap.
const WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900];
// A wait lasts from a chat-ops click (seconds) to a sign-off over a weekend (days).
const WAIT_DURATION_BUCKETS = [1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600];
// API calls are Redis round trips: milliseconds; SSE streams stay open for the run's length.
const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120];

/**
 * Baton's Prometheus metrics: one Registry per process, passed down, so the API and the
 * worker of one `baton start` process export into the same registry, and a test can own
 * a registry of its own. Labels are bounded: runtime and agent values past `labelLimit`
 * become "_other" (a client can submit any runtime or agent name, and a label per typo
 * would grow Prometheus without end); `scope` is added only when asked for.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly scopeLabel: boolean;
  private readonly runtimes: BoundedValues;
  private readonly agents: BoundedValues;
  /**
   * Runtimes and agents that workers registered (this process's own worker, or live workers
   * the API saw in the registry): the only values a runtime or agent label takes besides
   * "_other". A client names any runtime and agent it likes in a submit; those names must not
   * become series on an unauthenticated /metrics.
   */
  private readonly knownRuntimes = new Set<string>();
  private readonly knownAgents = new Set<string>();
  private readonly queueCounters = new Map<string, QueueCounter>();
  private readonly waitingCounters = new Map<string, WaitingCounter>();
  private readonly inFlightSources: { runtime: string; read(): number }[] = [];
  private readonly collectTimeoutMs: number;
  /** Reads the provider rate-limit buckets' windows at scrape time (RateLimiter.list), once a process watches them. */
  private rateLimitReader: (() => Promise<readonly BucketState[]>) | undefined;
  /** The buckets as one scrape read them: both bucket gauges collect from one read. */
  private bucketsRead: { at: number; read: Promise<readonly BucketState[]> } | undefined;
  /** Reads what event-stream readers hold at scrape time (watchStreamBuffers). */
  private streamBuffers: (() => { held: number; most: number; read: number }) | undefined;

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
  /** Reads what the limits hold back at scrape time (watchFlowControl). */
  private flowControl: ((perScope: boolean) => Promise<HeldBack>) | undefined;
  private heldBackRead: { at: number; read: Promise<HeldBack | undefined> } | undefined;
  readonly schemaChecks: Counter<string>;
  readonly mcpRequests: Counter<string>;
  readonly mcpToolCalls: Counter<string>;
  readonly rateLimitWait: Histogram<string>;
  readonly rateLimitPauses: Counter<string>;
  readonly rateLimitLimit: Gauge<string>;
  readonly rateLimitBuckets: Gauge;
  readonly mcpCalls: Counter<string>;
  /** MCP tool names come from the servers an agent names: bounded like runtimes and agents. */
  private readonly mcpTools: BoundedValues;

  constructor(o: MetricsOptions) {
    this.scopeLabel = o.scopeLabel;
    this.runtimes = new BoundedValues(o.labelLimit);
    this.agents = new BoundedValues(o.labelLimit);
    this.mcpTools = new BoundedValues(o.labelLimit);
    // Well inside Prometheus's scrape timeout (5 s in compose): a Redis outage costs the queue series, not the scrape.
    this.collectTimeoutMs = o.collectTimeoutMs ?? 2_000;
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

    // prom-client calls collect() with `this` bound to the gauge.
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    new Gauge({
      name: 'baton_queue_jobs', help: 'BullMQ jobs per runtime queue and state, read at scrape time.',
      labelNames: ['runtime', 'state'], registers,
      async collect() {
        this.reset();
        await Promise.all([...self.queueCounters].map(async ([runtime, count]) => {
          try {
            const counts = await answeredWithin(count(runtime), self.collectTimeoutMs);
            for (const state of QUEUE_STATES) this.set({ runtime, state }, counts[state] ?? 0);
          } catch {
            self.collectErrors.inc({ collector: 'queue_jobs' });
          }
        }));
      },
    });
    new Gauge({
      name: 'baton_runs_waiting',
      help: 'Runs in status waiting per runtime, by kind of wait (a run waiting on two kinds counts under both); all scopes, read at scrape time.',
      labelNames: ['runtime', 'kind'], registers,
      async collect() {
        this.reset();
        await Promise.all([...self.waitingCounters].map(async ([runtime, count]) => {
          try {
            const counts = await answeredWithin(count(runtime), self.collectTimeoutMs);
            for (const kind of WAIT_KINDS) this.set({ runtime, kind }, counts[kind] ?? 0);
          } catch {
            self.collectErrors.inc({ collector: 'runs_waiting' });
          }
        }));
      },
    });
    new Gauge({
      name: 'baton_runs_held_back',
      help: "Runnable runs parked for a slot, by the limit holding their scope back (its maxActive, its fair share, a key's maxActivePerKey); all scopes, read at scrape time.",
      labelNames: this.scopeLabel ? ['limit', 'scope'] : ['limit'], registers,
      async collect() {
        this.reset();
        const held = await self.readHeldBack();
        if (!held) return;
        for (const limit of HELD_BY) this.set({ limit }, held.parked[limit]);
        for (const [scope, s] of held.scopes ?? []) this.set({ limit: s.heldBy, scope }, s.parked);
      },
    });
    // One read per scrape for the four (prom-client collects a registry's metrics at once).
    const fromHeldBack = (name: string, help: string, value: (held: HeldBack) => number) => new Gauge({
      name, help, registers,
      async collect() {
        this.reset();
        const held = await self.readHeldBack();
        if (held) this.set(value(held));
      },
    });
    fromHeldBack(
      'baton_fair_share_level',
      "Workers' slots per unit of scope weight while scopes contend for them (a scope's share is ceil(level x weight)); 0 when they do not contend.",
      (held) => held.level ?? 0,
    );
    fromHeldBack('baton_fair_share_capacity', "The live workers' slots the fair share was last worked out for (0 when no scopes contend).", (held) => held.capacity);
    fromHeldBack('baton_scope_slots_active', "Runs holding a scope's slot (dispatched, running, retrying), all scopes; read at scrape time.", (held) => held.active);
    this.collectErrors.inc({ collector: 'flow_control' }, 0);
    new Gauge({
      name: 'baton_worker_runs_in_flight', help: 'Runs the workers of this process hold a lease on.',
      labelNames: ['runtime'], registers,
      collect() {
        this.reset();
        const sums = new Map<string, number>();
        for (const s of self.inFlightSources) sums.set(s.runtime, (sums.get(s.runtime) ?? 0) + s.read());
        for (const [runtime, n] of sums) this.set({ runtime }, n);
      },
    });
    new Gauge({
      name: 'baton_rate_limit_used',
      help: "What a provider rate-limit bucket's 60 s window holds, read at scrape time, by unit: requests, and tokens (settled, or reserved by calls in flight).",
      labelNames: ['bucket', 'unit'], registers,
      async collect() {
        this.reset();
        if (!self.rateLimitReader) return;
        try {
          for (const b of await answeredWithin(self.bucketsOfScrape(), self.collectTimeoutMs)) {
            if (b.rpm !== null) this.set({ bucket: b.bucket, unit: 'requests' }, b.requests);
            if (b.tpm !== null) this.set({ bucket: b.bucket, unit: 'tokens' }, b.tokens);
          }
        } catch {
          self.collectErrors.inc({ collector: 'rate_limits' });
        }
      },
    });
    new Gauge({
      name: 'baton_rate_limit_waiting_scopes',
      help: 'Scopes waiting for a provider rate-limit bucket now (they share it by weight), read at scrape time.',
      labelNames: ['bucket'], registers,
      async collect() {
        this.reset();
        if (!self.rateLimitReader) return;
        try {
          const buckets = await answeredWithin(self.bucketsOfScrape(), self.collectTimeoutMs);
          for (const b of buckets) this.set({ bucket: b.bucket }, b.waiting.count);
        } catch {
          // Counted once, by baton_rate_limit_used's collector, which read the same.
        }
      },
    });
    if (o.defaultMetrics ?? true) {
      collectDefaultMetrics({ register: this.registry });
      // prom-client names these gauges `_total`, which Prometheus reserves for counters
      // (promtool rejects them); each is the sum of its per-type gauge, exported as well.
      for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
        this.registry.removeSingleMetric(name);
      }
    }
  }

  /** A runtime and its agents are served by workers: their names may be label values. */
  registerRuntime(runtime: string, agents: Iterable<string>): void {
    this.knownRuntimes.add(runtime);
    for (const a of agents) this.knownAgents.add(a);
  }

  private runtimeLabel(runtime: string): string {
    return this.knownRuntimes.has(runtime) ? this.runtimes.get(runtime) : OTHER;
  }

  /** The bounded labels of a run's metrics. */
  runLabels(run: Pick<RunRecord, 'runtime' | 'agent' | 'scope'>): Record<string, string> {
    const l: Record<string, string> = {
      runtime: this.runtimeLabel(run.runtime),
      agent: this.knownAgents.has(run.agent) ? this.agents.get(run.agent) : OTHER,
    };
    if (this.scopeLabel) l.scope = run.scope;
    return l;
  }

  runSubmitted(run: RunRecord): void {
    this.submitted.inc(this.runLabels(run));
  }

  runFinished(run: RunRecord, status: TerminalStatus): void {
    const l = { ...this.runLabels(run), status };
    this.finished.inc(l);
    // A run cancelled before it ever started has no duration to speak of.
    if (run.startedAt) this.duration.observe(l, Math.max(0, (run.finishedAt ?? Date.now()) - run.startedAt) / 1000);
  }

  /**
   * Creates the series of a worker's runtime and agents at zero, so rate() sees the first
   * increment and a fresh dashboard shows 0 instead of "No data" (a percentile of no runs is
   * NaN: Grafana draws no line but lists the series). Not possible per scope. Submits are
   * counted here too: this process's schedules and bulk re-runs submit.
   */
  initRuntime(runtime: string, agents: Iterable<string>): void {
    const names = [...agents];
    this.registerRuntime(runtime, names);
    if (this.scopeLabel) return;
    const rt = this.runtimes.get(runtime);
    for (const name of names) {
      const l = { runtime: rt, agent: this.agents.get(name) };
      const counters = [
        this.submitted, this.started, this.retries, this.recoveries, this.blocked, this.tokens, this.appends, this.appendedEvents,
      ];
      for (const c of counters) c.inc(l, 0);
      for (const status of TERMINAL_STATUSES) {
        this.finished.inc({ ...l, status }, 0);
        this.duration.zero({ ...l, status });
      }
      this.queueWait.zero(l);
      for (const kind of ['input', 'output']) this.modelTokens.inc({ kind, agent: l.agent }, 0);
      for (const action of ['failed', 'waiting']) this.budgetRefusals.inc({ ...l, action }, 0);
    }
    for (const kind of ['step', 'infer', 'tool']) {
      this.memoHits.inc({ runtime: rt, kind }, 0);
      this.memoMisses.inc({ runtime: rt, kind }, 0);
    }
    for (const [kind, outcome] of [['input', 'resumed'], ['input', 'timed_out'], ['approval', 'resumed'], ['approval', 'timed_out'], ['sleep', 'slept'], ['budget', 'slept']]) {
      this.waitDuration.zero({ runtime: rt, kind, outcome });
    }
  }

  /** A wait of a run of `runtime` stopped pending (this process ended it). */
  waitEnded(runtime: string, wait: Pick<AnsweredWait, 'kind' | 'since'>, outcome: WaitOutcome, now = Date.now()): void {
    this.waitDuration.observe({ runtime: this.runtimes.get(runtime), kind: wait.kind, outcome }, Math.max(0, now - wait.since) / 1000);
  }

  /** Waits the sweeper (or a park) found past their deadline. */
  waitsExpired(runtime: string, waits: readonly AnsweredWait[]): void {
    // A budget wait ends at the day's end, as a sleep does at its time.
    for (const w of waits) this.waitEnded(runtime, w, w.kind === 'sleep' || w.kind === 'budget' ? 'slept' : 'timed_out');
  }

  /** Hooks for the run executor of a worker serving `runtime`. */
  executorEvents(runtime: string): Required<ExecutorEvents> {
    const rt = () => this.runtimeLabel(runtime);
    const memo: MemoEvents = {
      hit: (kind) => this.memoHits.inc({ runtime: rt(), kind }),
      miss: (kind) => this.memoMisses.inc({ runtime: rt(), kind }),
    };
    return {
      ...memo,
      started: (run, recovered) => {
        const l = this.runLabels(run);
        if (recovered) return void this.recoveries.inc(l);
        this.started.inc(l);
        // Fence 1 is the run's first claim ever: the moment its queue wait ends.
        if (run.fence === 1 && run.startedAt) this.queueWait.observe(l, Math.max(0, run.startedAt - run.createdAt) / 1000);
      },
      finished: (run, status) => this.runFinished(run, status),
      waiting: (run, park) => this.waitsExpired(run.runtime, park.answered),
      retried: (run) => this.retries.inc(this.runLabels(run)),
      blocked: (run) => this.blocked.inc(this.runLabels(run)),
      appended: (run, events, tokens) => {
        const l = this.runLabels(run);
        this.appends.inc(l);
        this.appendedEvents.inc(l, events);
        if (tokens > 0) this.tokens.inc(l, tokens);
      },
      modelUsage: (_run, agent, calls) => {
        const a = this.agents.get(agent);
        for (const c of calls) {
          if (c.inputTokens) this.modelTokens.inc({ kind: 'input', agent: a }, c.inputTokens);
          if (c.outputTokens) this.modelTokens.inc({ kind: 'output', agent: a }, c.outputTokens);
        }
      },
      budgetRefused: (run, action) => this.budgetRefusals.inc({ ...this.runLabels(run), action }),
      mcpCall: (run, n) => {
        // Past the label limit a server's tool folds into "_other" with its server.
        const known = this.mcpTools.get(`${n.server}/${n.tool}`) !== OTHER;
        const where = known ? { server: n.server, tool: n.tool } : { server: OTHER, tool: OTHER };
        this.mcpCalls.inc({ agent: this.runLabels(run).agent, ...where, outcome: n.outcome });
      },
      steering: (run, outcome, count) => this.steeringOutcome(run.runtime, outcome, count),
    };
  }

  /** Steering messages of a run of `runtime` that reached `outcome` (baton_steering_messages_total). */
  steeringOutcome(runtime: string, outcome: 'pending' | 'turn' | 'delivered' | 'not-delivered', count = 1): void {
    this.steering.inc({ runtime: this.runtimeLabel(runtime), outcome: outcome.replace('-', '_') }, count);
  }

  /** Counts a registered runtime's BullMQ jobs at every scrape (others, and runtimes past the label limit, are not read). */
  watchQueue(runtime: string, count: QueueCounter): void {
    if (this.queueCounters.has(runtime) || this.runtimeLabel(runtime) === OTHER) return;
    this.queueCounters.set(runtime, count);
  }

  /** Counts a registered runtime's waiting runs at every scrape (others, and runtimes past the label limit, are not read). */
  /** What the limits hold back, read once for the gauges of one scrape (undefined: not watched, or Redis did not answer). */
  private readHeldBack(): Promise<HeldBack | undefined> {
    const read = this.flowControl;
    if (!read) return Promise.resolve(undefined);
    if (!this.heldBackRead || Date.now() - this.heldBackRead.at > 1_000) {
      this.heldBackRead = {
        at: Date.now(),
        read: answeredWithin(read(this.scopeLabel), this.collectTimeoutMs).catch(() => {
          this.collectErrors.inc({ collector: 'flow_control' });
          return undefined;
        }),
      };
    }
    return this.heldBackRead.read;
  }

  /** Exports the runs the limits hold back and the fair share at every scrape (once per process). */
  watchFlowControl(read: (perScope: boolean) => Promise<HeldBack>): void {
    this.flowControl ??= read;
  }

  watchWaiting(runtime: string, count: WaitingCounter): void {
    if (this.waitingCounters.has(runtime) || this.runtimeLabel(runtime) === OTHER) return;
    this.waitingCounters.set(runtime, count);
  }

  /**
   * Exports the provider rate-limit buckets RATE_LIMITS defines: their limits, what their
   * windows hold (`read` at every scrape), and their wait and pause series from zero.
   */
  watchRateLimits(limits: RateLimits, read: () => Promise<readonly BucketState[]>): void {
    this.rateLimitBuckets.set(limits.size);
    if (limits.size === 0) return;
    this.rateLimitReader = read;
    this.collectErrors.inc({ collector: 'rate_limits' }, 0);
    for (const [bucket, limit] of limits) {
      this.rateLimitWait.zero({ bucket });
      for (const by of ['provider', 'operator']) this.rateLimitPauses.inc({ bucket, by }, 0);
      if (limit.rpm !== undefined) this.rateLimitLimit.set({ bucket, unit: 'requests' }, limit.rpm);
      if (limit.tpm !== undefined) this.rateLimitLimit.set({ bucket, unit: 'tokens' }, limit.tpm);
    }
  }

  /** The buckets for this scrape: one read, shared by the gauges that collect within a second of it. */
  private bucketsOfScrape(): Promise<readonly BucketState[]> {
    const now = Date.now();
    if (!this.bucketsRead || now - this.bucketsRead.at > 1_000) this.bucketsRead = { at: now, read: this.rateLimitReader!() };
    return this.bucketsRead.read;
  }

  /** Hooks for the process's RateLimiter. */
  readonly rateLimitEvents: RateLimitEvents = {
    waited: (bucket, ms) => this.rateLimitWait.observe({ bucket }, Math.max(0, ms) / 1000),
    paused: (bucket, by) => this.rateLimitPauses.inc({ bucket, by }),
  };

  /** Hooks for the process's SchemaGuard. */
  readonly schemaGuardEvents: SchemaGuardEvents = {
    ended: (op, outcome) => this.schemaChecks.inc({ op, outcome }),
  };

  /** Reports `read()` as the runs in flight of a worker of `runtime`. */
  watchInFlight(runtime: string, read: () => number): () => void {
    const source = { runtime: this.runtimeLabel(runtime), read };
    this.inFlightSources.push(source);
    return () => {
      const i = this.inFlightSources.indexOf(source);
      if (i >= 0) this.inFlightSources.splice(i, 1);
    };
  }

  /**
   * Exports what this process's event-stream readers hold (`read()` at every scrape): bytes of
   * events read from logs and not yet taken by their sockets, in all and the most of one
   * reader, and the bytes read from logs for readers so far.
   */
  watchStreamBuffers(read: () => { held: number; most: number; read: number }): void {
    if (this.streamBuffers) return;
    this.streamBuffers = read;
    const registers = [this.registry];
    new Gauge({
      name: 'baton_sse_buffered_bytes',
      help: "Bytes this API process holds for its event-stream readers: events read from logs that their sockets have not taken (a replay page in hand, a response's unsent buffer).",
      registers,
      collect() { this.set(read().held); },
    });
    new Gauge({
      name: 'baton_sse_buffered_bytes_max', help: 'The most bytes one event-stream reader of this API process holds (as baton_sse_buffered_bytes).',
      registers,
      collect() { this.set(read().most); },
    });
    new Counter({
      name: 'baton_sse_log_read_bytes_total', help: 'Bytes of events this API process read from run event logs for its readers (replay pages).',
      registers,
      collect() {
        this.reset();
        this.inc(read().read);
      },
    });
  }

  /** A JSON-RPC message to /mcp, by its method (an unknown one as "_other"). */
  mcpRequest(method: string): void {
    this.mcpRequests.inc({ method: (MCP_METHODS as readonly string[]).includes(method) ? method : OTHER });
  }

  mcpToolCall(mode: 'call' | 'task', outcome: string): void {
    this.mcpToolCalls.inc({ mode, outcome });
  }

  sseOpened(scope: string): void {
    if (this.scopeLabel) this.sseClients.inc({ scope });
    else this.sseClients.inc();
  }

  sseClosed(scope: string): void {
    if (this.scopeLabel) this.sseClients.dec({ scope });
    else this.sseClients.dec();
  }

  httpRequest(method: string, route: string, status: number, seconds: number): void {
    this.http.observe({ method, route, status: String(status) }, seconds);
  }

  /** Passed to createRedis; connection names are fixed per role, so the label stays bounded. */
  readonly redisEvents: ConnectionEvents = {
    opened: (connection) => {
      this.redisErrors.inc({ connection }, 0);
      this.redisReconnects.inc({ connection }, 0);
    },
    error: (connection) => this.redisErrors.inc({ connection }),
    reconnected: (connection) => this.redisReconnects.inc({ connection }),
  };

  /** The exposition text and its content type, for a /metrics endpoint. */
  async expose(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

/**
 * Whether a scrape may read /metrics: always without a METRICS_TOKEN, else only with
 * `Authorization: Bearer <token>`, compared in constant time (over digests, so the lengths
 * tell nothing either).
 */
export function metricsAuthorized(authorization: string | undefined, token: string | undefined): boolean {
  if (token === undefined) return true;
  if (authorization === undefined || !authorization.startsWith('Bearer ')) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(authorization.slice('Bearer '.length)), digest(token));
}

/** Keeps the first `limit` distinct values of a label; later ones read as "_other". */
class BoundedValues {
  private readonly seen = new Set<string>();
  constructor(private readonly limit: number) {}

  get(value: string): string {
    if (this.seen.has(value)) return value;
    if (this.seen.size >= this.limit) return OTHER;
    this.seen.add(value);
    return value;
  }
}

/** A scrape-time count, or a throw (counted as a collect error) when Redis does not answer in time. */
async function answeredWithin<T>(p: Promise<T>, ms: number): Promise<T> {
  const out = await withTimeout(p, ms);
  if (out === 'timeout') throw new Error(`no answer within ${ms} ms`);
  return out;
}
