import type { JobType } from 'bullmq';
import { Counter, Gauge, type Registry } from 'prom-client';
import { HELD_BY, type HeldBack } from '../engine/flow/fair-share.ts';
import type { BucketState } from '../engine/flow/rate-limiter.ts';
import { WAIT_KINDS, type WaitKind } from '../contract/runs.ts';
import { withTimeout } from '../timeout.ts';

/** BullMQ job states exported per runtime queue (completed jobs are removed at once, see dispatcher.ts). */
export const QUEUE_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'failed'] as const satisfies readonly JobType[];

/** Reads a runtime queue's job counts by state (Dispatcher.queue(runtime).getJobCounts). */
export type QueueCounter = (runtime: string) => Promise<Record<string, number>>;

/** Reads how many runs of a runtime wait, by kind of wait, over every scope (ops/waiting-runs.ts). */
export type WaitingCounter = (runtime: string) => Promise<Record<WaitKind, number>>;

export interface ScrapeOptions {
  registry: Registry;
  /** Counts a collector that failed, by collector (baton_metrics_collect_errors_total). */
  collectErrors: Counter<string>;
  /** Whether the held-back gauge has a `scope` label (METRICS_SCOPE_LABEL). */
  scopeLabel: boolean;
  /** How long a scrape waits for Redis to count a queue's jobs. */
  collectTimeoutMs: number;
}

/**
 * The series read at scrape time, from the sources a process registers with its Metrics:
 * queue job counts, waiting runs, what the limits hold back, runs in flight, the provider
 * rate-limit buckets' windows and what event-stream readers hold. A source that does not
 * answer within collectTimeoutMs costs its series that scrape, counted as a collect error.
 */
export class ScrapeGauges {
  private readonly registry: Registry;
  private readonly collectErrors: Counter<string>;
  private readonly scopeLabel: boolean;
  private readonly collectTimeoutMs: number;
  private readonly queueCounters = new Map<string, QueueCounter>();
  private readonly waitingCounters = new Map<string, WaitingCounter>();
  private readonly inFlightSources: { runtime: string; read(): number }[] = [];
  /** Reads the provider rate-limit buckets' windows at scrape time (RateLimiter.list), once a process watches them. */
  private rateLimitReader: (() => Promise<readonly BucketState[]>) | undefined;
  /** The buckets as one scrape read them: both bucket gauges collect from one read. */
  private bucketsRead: { at: number; read: Promise<readonly BucketState[]> } | undefined;
  /** Reads what event-stream readers hold at scrape time (watchStreamBuffers). */
  private streamBuffers: (() => { held: number; most: number; read: number }) | undefined;
  /** Reads what the limits hold back at scrape time (watchFlowControl). */
  private flowControl: ((perScope: boolean) => Promise<HeldBack>) | undefined;
  private heldBackRead: { at: number; read: Promise<HeldBack | undefined> } | undefined;

  constructor(o: ScrapeOptions) {
    this.registry = o.registry;
    this.collectErrors = o.collectErrors;
    this.scopeLabel = o.scopeLabel;
    this.collectTimeoutMs = o.collectTimeoutMs;
    const registers = [this.registry];
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
      labelNames: self.scopeLabel ? ['limit', 'scope'] : ['limit'], registers,
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
    self.collectErrors.inc({ collector: 'flow_control' }, 0);
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
  }

  /** Counts a runtime's BullMQ jobs at every scrape (once per runtime). */
  watchQueue(runtime: string, count: QueueCounter): void {
    if (!this.queueCounters.has(runtime)) this.queueCounters.set(runtime, count);
  }

  /** Counts a runtime's waiting runs at every scrape (once per runtime). */
  watchWaiting(runtime: string, count: WaitingCounter): void {
    if (!this.waitingCounters.has(runtime)) this.waitingCounters.set(runtime, count);
  }

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

  /** Reads the provider rate-limit buckets' windows at every scrape. */
  watchRateLimits(read: () => Promise<readonly BucketState[]>): void {
    this.rateLimitReader = read;
  }

  /** The buckets for this scrape: one read, shared by the gauges that collect within a second of it. */
  private bucketsOfScrape(): Promise<readonly BucketState[]> {
    const now = Date.now();
    if (!this.bucketsRead || now - this.bucketsRead.at > 1_000) this.bucketsRead = { at: now, read: this.rateLimitReader!() };
    return this.bucketsRead.read;
  }

  /** Reports `read()` as the runs in flight of a worker whose runtime label is `runtime`. */
  watchInFlight(runtime: string, read: () => number): () => void {
    const source = { runtime, read };
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
}

/** A scrape-time count, or a throw (counted as a collect error) when Redis does not answer in time. */
async function answeredWithin<T>(p: Promise<T>, ms: number): Promise<T> {
  const out = await withTimeout(p, ms);
  if (out === 'timeout') throw new Error(`no answer within ${ms} ms`);
  return out;
}
