import { collectDefaultMetrics } from 'prom-client';
import type { HeldBack } from '../engine/flow/fair-share.ts';
import type { MemoEvents } from '../engine/context.ts';
import type { ExecutorEvents } from '../engine/executor.ts';
import type { ConnectionEvents } from '../redis/redis.ts';
import type { RunRecord } from '../transitions/record.ts';
import type { AnsweredWait } from '../transitions/reply.ts';
import { TERMINAL_STATUSES, type TerminalStatus } from '../contract/runs.ts';
import type { RateLimits } from '../config/rate-limits.ts';
import type { BucketState, RateLimitEvents } from '../engine/flow/rate-limiter.ts';
import type { SchemaGuardEvents } from '../engine/schema/schema-guard.ts';
import { BoundedValues, MCP_METHODS, OTHER } from './metrics-labels.ts';
import { MetricSeries } from './metrics-series.ts';
import { ScrapeGauges, type QueueCounter, type WaitingCounter } from './metrics-scrape.ts';

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

/**
 * Baton's Prometheus metrics: one Registry per process, passed down, so the API and the
 * worker of one `baton start` process export into the same registry, and a test can own
 * a registry of its own. Labels are bounded: runtime and agent values past `labelLimit`
 * become "_other" (a client can submit any runtime or agent name, and a label per typo
 * would grow Prometheus without end); `scope` is added only when asked for. The series
 * are defined in metrics-series.ts, those read at scrape time in metrics-scrape.ts.
 */
export class Metrics extends MetricSeries {
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
  /** MCP tool names come from the servers an agent names: bounded like runtimes and agents. */
  private readonly mcpTools: BoundedValues;
  private readonly scrape: ScrapeGauges;

  constructor(o: MetricsOptions) {
    super(o.scopeLabel);
    this.runtimes = new BoundedValues(o.labelLimit);
    this.agents = new BoundedValues(o.labelLimit);
    this.mcpTools = new BoundedValues(o.labelLimit);
    this.scrape = new ScrapeGauges({
      registry: this.registry, collectErrors: this.collectErrors, scopeLabel: o.scopeLabel,
      // Well inside Prometheus's scrape timeout (5 s in compose): a Redis outage costs the queue series, not the scrape.
      collectTimeoutMs: o.collectTimeoutMs ?? 2_000,
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

  /** A notification heard on a followed scope channel, by how it was sent (baton_live_notifications_total). */
  liveNotification(kind: 'publish' | 'spublish'): void {
    this.liveNotifications[kind].inc();
  }

  /** Steering messages of a run of `runtime` that reached `outcome` (baton_steering_messages_total). */
  steeringOutcome(runtime: string, outcome: 'pending' | 'turn' | 'delivered' | 'not-delivered', count = 1): void {
    this.steering.inc({ runtime: this.runtimeLabel(runtime), outcome: outcome.replace('-', '_') }, count);
  }

  /** Counts a registered runtime's BullMQ jobs at every scrape (others, and runtimes past the label limit, are not read). */
  watchQueue(runtime: string, count: QueueCounter): void {
    if (this.runtimeLabel(runtime) !== OTHER) this.scrape.watchQueue(runtime, count);
  }

  /** Counts a registered runtime's waiting runs at every scrape (others, and runtimes past the label limit, are not read). */
  watchWaiting(runtime: string, count: WaitingCounter): void {
    if (this.runtimeLabel(runtime) !== OTHER) this.scrape.watchWaiting(runtime, count);
  }

  /** Exports the runs the limits hold back and the fair share at every scrape (once per process). */
  watchFlowControl(read: (perScope: boolean) => Promise<HeldBack>): void {
    this.scrape.watchFlowControl(read);
  }

  /**
   * Exports the provider rate-limit buckets RATE_LIMITS defines: their limits, what their
   * windows hold (`read` at every scrape), and their wait and pause series from zero.
   */
  watchRateLimits(limits: RateLimits, read: () => Promise<readonly BucketState[]>): void {
    this.rateLimitBuckets.set(limits.size);
    if (limits.size === 0) return;
    this.scrape.watchRateLimits(read);
    this.collectErrors.inc({ collector: 'rate_limits' }, 0);
    for (const [bucket, limit] of limits) {
      this.rateLimitWait.zero({ bucket });
      for (const by of ['provider', 'operator']) this.rateLimitPauses.inc({ bucket, by }, 0);
      if (limit.rpm !== undefined) this.rateLimitLimit.set({ bucket, unit: 'requests' }, limit.rpm);
      if (limit.tpm !== undefined) this.rateLimitLimit.set({ bucket, unit: 'tokens' }, limit.tpm);
    }
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
    return this.scrape.watchInFlight(this.runtimeLabel(runtime), read);
  }

  /**
   * Exports what this process's event-stream readers hold (`read()` at every scrape): bytes of
   * events read from logs and not yet taken by their sockets, in all and the most of one
   * reader, and the bytes read from logs for readers so far.
   */
  watchStreamBuffers(read: () => { held: number; most: number; read: number }): void {
    this.scrape.watchStreamBuffers(read);
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
