import { hostname } from 'node:os';
import type { Redis } from 'ioredis';
import { isConnectionLoss, redisNowMs } from '../../redis/redis.ts';
import type { Keys } from '../../keys.ts';
import type { Logger } from '../../logger.ts';

/**
 * Which runtimes exist and what their live workers offer. Each worker keeps a registration
 * (runtime, agents, concurrency) and the time it last offered each of its agents fresh with
 * a heartbeat; the API reads them to list runtimes, to warn a submit for an agent no live
 * worker of the runtime has (and refuse one for an agent none offered in a day), and the
 * sweeper to fail runs no worker served for AGENT_GRACE_MS.
 *
 * Liveness: a worker beats every HEARTBEAT_MS and counts as live for LEASE_MS after its last
 * beat, the same three-missed-beats rule as run leases, so "live" here means what the sweeper
 * means. Times are Redis TIME, so clocks of API and worker hosts never disagree.
 */

export interface WorkerRegistration {
  workerId: string;
  runtime: string;
  agents: string[];
  /** Agent name -> its description, for the agents that have one (absent from workers of older releases). */
  descriptions?: Record<string, string>;
  concurrency: number;
  host: string;
  pid: number;
  startedAt: number;
  /** Redis time of the last heartbeat. */
  beatAt: number;
}

export interface RuntimeInfo {
  runtimeId: string;
  liveWorkers: number;
  /** Agents offered by at least one live worker, sorted. */
  agents: string[];
  /** Sum of the live workers' concurrency: runs the runtime executes at once. */
  concurrency: number;
  /** Redis time of the newest heartbeat of any of its workers. */
  lastSeenAt: number;
}

/**
 * A submit reuses "a live worker offers this agent" for 1 s instead of reading the registry
 * on every request (two commands saved on the hot path). Only the positive answer is kept:
 * if the worker died within that second the run queues, as it would have a second earlier;
 * a refusal or a warning is always decided on fresh data, so a worker that just started is
 * seen at once.
 */
const OFFERED_CACHE_MS = 1_000;

/** A runtime none of whose workers beat for a day is dropped from the list. */
const FORGET_RUNTIME_AFTER_MS = 24 * 3600_000;

function parseRegistrations(raw: Record<string, string>): WorkerRegistration[] {
  const out: WorkerRegistration[] = [];
  for (const json of Object.values(raw)) {
    try {
      const r = JSON.parse(json) as WorkerRegistration;
      if (typeof r.beatAt === 'number' && Array.isArray(r.agents)) out.push(r);
    } catch {
      // A registration that is not JSON was not written by Baton; it cannot count as live.
    }
  }
  return out;
}

/** Told of a runtime found with live workers, and the agents they offer. */
export type LiveListener = (runtime: string, agents: string[]) => void;

/** The read side of the registry: one per process (the API's listings and warnings, a worker's readiness). */
export class WorkerRegistry {
  /** runtime + agent -> local time until which "a live worker offers it" is taken as known. */
  private readonly offered = new Map<string, number>();
  /** Told of each runtime found with live workers, and their agents (the API's metrics labels follow it). */
  private readonly liveListeners: LiveListener[] = [];

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    /** LEASE_MS: how long after its last beat a worker still counts as live. */
    private readonly liveMs: number,
  ) {}

  /** Adds a listener told of each runtime this registry finds with live workers. */
  onLive(listener: LiveListener): void {
    this.liveListeners.push(listener);
  }

  private seenLive(runtime: string, live: readonly WorkerRegistration[]): void {
    if (!live.length) return;
    const agents = live.flatMap((w) => w.agents);
    for (const listener of this.liveListeners) listener(runtime, agents);
  }

  async liveWorkers(runtime: string): Promise<WorkerRegistration[]> {
    const [now, raw] = await Promise.all([redisNowMs(this.redis), this.redis.hgetall(this.keys.runtimeWorkers(runtime))]);
    const live = parseRegistrations(raw).filter((w) => w.beatAt + this.liveMs > now);
    this.seenLive(runtime, live);
    return live;
  }

  async runtimes(): Promise<RuntimeInfo[]> {
    const [now, flat] = await Promise.all([redisNowMs(this.redis), this.redis.zrange(this.keys.runtimes, 0, -1, 'WITHSCORES')]);
    const out: RuntimeInfo[] = [];
    for (let i = 0; i < flat.length; i += 2) {
      const runtimeId = flat[i];
      const live = parseRegistrations(await this.redis.hgetall(this.keys.runtimeWorkers(runtimeId)))
        .filter((w) => w.beatAt + this.liveMs > now);
      this.seenLive(runtimeId, live);
      out.push({
        runtimeId,
        liveWorkers: live.length,
        agents: [...new Set(live.flatMap((w) => w.agents))].sort(),
        concurrency: live.reduce((n, w) => n + w.concurrency, 0),
        lastSeenAt: Number(flat[i + 1]),
      });
    }
    return out.sort((a, b) => a.runtimeId.localeCompare(b.runtimeId));
  }

  /**
   * The agents live workers of `runtime` offer now, sorted by name, each with the description
   * one of those workers gives it (the newest registration's, when workers of two deploys differ).
   */
  async offeredAgents(runtime: string): Promise<{ name: string; description?: string }[]> {
    const live = (await this.liveWorkers(runtime)).sort((a, b) => a.beatAt - b.beatAt);
    const offered = new Map<string, string | undefined>();
    for (const w of live) {
      for (const name of w.agents) offered.set(name, w.descriptions?.[name] ?? offered.get(name));
    }
    return [...offered].sort(([a], [b]) => a.localeCompare(b))
      .map(([name, description]) => (description === undefined ? { name } : { name, description }));
  }

  /**
   * The agents `runtime`'s workers served in the last day, each with the Redis time a live
   * worker last offered it, and the Redis time now. An agent is served now while
   * `lastServed + LEASE_MS > now`.
   */
  async agentsServed(runtime: string): Promise<{ now: number; lastServed: Map<string, number> }> {
    const [now, raw] = await Promise.all([redisNowMs(this.redis), this.redis.hgetall(this.keys.runtimeAgents(runtime))]);
    return { now, lastServed: new Map(Object.entries(raw).map(([agent, at]) => [agent, Number(at)])) };
  }

  /**
   * What a submit of `agent` to `runtime` should be told. Runs are routed by agent, so a run
   * whose agent no live worker serves waits queued (a deploy may be adding the agent, or
   * starting the runtime's workers); the warning says so, and that it fails UNKNOWN_AGENT
   * after AGENT_GRACE_MS without such a worker.
   *
   * `unknown` is set when the runtime's workers were seen in the last day (its agents hash:
   * the last time any worker offered each agent, kept a day) and none of them ever offered
   * this agent in that day: the typo case, which the submit refuses unless told to queue
   * (submissions.ts). A day, not AGENT_GRACE_MS: a worker restarting, a rolling deploy, a
   * pool scaled to zero overnight all leave their agents in the hash, so their runs still
   * queue, while a name never served is unknown whether the workers are up this minute or not.
   * A runtime with no worker seen in a day (the API started before its workers, or a runtime
   * nobody serves yet) knows no agent and leaves every one to wait.
   */
  async admission(runtime: string, agent: string, graceMs: number): Promise<AgentAdmission> {
    const cacheKey = `${runtime}\n${agent}`;
    if ((this.offered.get(cacheKey) ?? 0) > Date.now()) return { warnings: [] };
    const [live, served] = await Promise.all([this.liveWorkers(runtime), this.agentsServed(runtime)]);
    if (live.some((w) => w.agents.includes(agent))) {
      this.offered.set(cacheKey, Date.now() + OFFERED_CACHE_MS);
      return { warnings: [] };
    }
    // The hash is pruned only when a worker of the runtime beats: read it by its times.
    const known = new Set(live.flatMap((w) => w.agents));
    for (const [a, at] of served.lastServed) if (at > served.now - FORGET_RUNTIME_AFTER_MS) known.add(a);
    const grace = `it fails UNKNOWN_AGENT if none starts within ${formatMs(graceMs)}`;
    const offered = [...new Set(live.flatMap((w) => w.agents))].sort();
    if (known.size > 0 && !known.has(agent)) {
      const agents = [...known].sort();
      return {
        unknown: agents,
        warnings: [
          `no worker of runtime "${runtime}" offered agent "${agent}" in the last day (its agents: ${quoteList(agents)}); ` +
          `the run stays queued until one does (${grace})`,
        ],
      };
    }
    if (live.length === 0) {
      return { warnings: [`no live worker serves runtime "${runtime}"; the run stays queued until one with agent "${agent}" starts (${grace})`] };
    }
    return {
      warnings: [
        `no live worker of runtime "${runtime}" serves agent "${agent}" (they offer ${quoteList(offered)}); ` +
        `the run stays queued until one does (${grace})`,
      ],
    };
  }
}

/** What the registry says of a submit's agent (WorkerRegistry.admission). */
export interface AgentAdmission {
  /** For the caller: no live worker serves the agent yet, so the run waits (empty: one does). */
  warnings: string[];
  /**
   * Set when workers of the runtime were seen in the last day and none offered the agent in
   * it: the agents they did offer, sorted.
   */
  unknown?: string[];
}

/** At most this many agent names in a message; the rest are counted. */
const NAMES_SHOWN = 20;

/** `["a", "b"]` -> `"a", "b"`, the first NAMES_SHOWN and how many more. */
export function quoteList(names: readonly string[]): string {
  const shown = names.slice(0, NAMES_SHOWN).map((a) => `"${a}"`).join(', ');
  return names.length > NAMES_SHOWN ? `${shown} and ${names.length - NAMES_SHOWN} more` : shown;
}

/** `600000` -> "10 min", `90000` -> "90 s". */
function formatMs(ms: number): string {
  return ms >= 120_000 && ms % 60_000 === 0 ? `${ms / 60_000} min` : `${Math.round(ms / 1000)} s`;
}

/** The worker's side: registers, beats every `beatMs`, and deregisters on stop. */
export class WorkerPresence {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private readonly startedAt = Date.now();
  private stopped = false;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly me: Pick<WorkerRegistration, 'workerId' | 'runtime' | 'agents' | 'descriptions' | 'concurrency'>,
    private readonly o: { beatMs: number; liveMs: number; log: Logger },
  ) {}

  /** Registers before returning, so a worker is visible before it claims anything. */
  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => {
      this.beating ??= this.beat()
        // Redis away: its connection says so once (redis.ts), not each beat.
        .catch((err) => { if (!isConnectionLoss(err)) this.o.log.warn({ err: (err as Error).message }, 'worker heartbeat failed'); })
        .finally(() => { this.beating = undefined; });
    }, this.o.beatMs);
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    if (this.stopped) return;
    const now = await redisNowMs(this.redis);
    const reg: WorkerRegistration = {
      ...this.me, host: hostname(), pid: process.pid, startedAt: this.startedAt, beatAt: now,
    };
    const workersKey = this.keys.runtimeWorkers(this.me.runtime);
    const agentsKey = this.keys.runtimeAgents(this.me.runtime);
    const [others, served] = await Promise.all([
      this.redis.hgetall(workersKey).then(parseRegistrations),
      this.redis.hgetall(agentsKey),
    ]);
    const m = this.redis.multi()
      .hset(workersKey, this.me.workerId, JSON.stringify(reg))
      .hset(agentsKey, Object.fromEntries(this.me.agents.map((a) => [a, now])))
      .zadd(this.keys.runtimes, now, this.me.runtime);
    // Agents no worker offered for a day are forgotten (their queues are no longer counted).
    const stale = Object.keys(served).filter((a) => Number(served[a]) < now - FORGET_RUNTIME_AFTER_MS);
    if (stale.length) m.hdel(agentsKey, ...stale);
    // Workers that died without deregistering (SIGKILL, lost host) are removed by their peers.
    const dead = others.filter((w) => w.workerId !== this.me.workerId && w.beatAt + this.o.liveMs < now);
    if (dead.length) m.hdel(workersKey, ...dead.map((w) => w.workerId));
    const forgotten = await this.redis.zrangebyscore(this.keys.runtimes, '-inf', now - FORGET_RUNTIME_AFTER_MS);
    for (const rt of forgotten) m.del(this.keys.runtimeWorkers(rt), this.keys.runtimeAgents(rt)).zrem(this.keys.runtimes, rt);
    await m.exec();
  }

  /** Deregisters, so the API stops counting this worker at once. Idempotent. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.beating;
    await this.redis.hdel(this.keys.runtimeWorkers(this.me.runtime), this.me.workerId).catch((err) => {
      this.o.log.warn({ err: (err as Error).message }, 'worker deregistration failed; it expires by itself');
    });
  }
}
