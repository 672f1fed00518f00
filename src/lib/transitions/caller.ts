import type { Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { Keys, ScopeKeys } from '../keys.ts';
import { ReplicaAcks } from '../redis/replica-acks.ts';
import type { Attempt } from './attempt.ts';
import { decode, type Replies, type Reply } from './reply.ts';
import { functionName, isMissingLibrary, loadLibrary, wire, type NamedKeys, type OptionsJson, type ScriptName } from './scripts.ts';

/**
 * The one way a unit (<name>.ts beside its <name>.lua) calls its script: keys by name, options
 * as one JSON object (lib/call.lua says how), the reply decoded by the unit's REPLY. A script
 * that asks for runs to be delivered returns dispatch orders; the unit hands them to the
 * dispatch port (BullMQ) before it returns (the outbox step; the sweeper repairs a crash in
 * between), so no caller can forget it. Nothing outside this room calls a script (`npm test`
 * checks).
 */

/** A script's ARGV after its options (append's events). */
type Payload = readonly (string | number)[];

/** ScriptCaller.call's `replies` for a reply the unit decodes itself. */
export const UNDECODED = 'undecoded';

/** Where dispatch orders go (engine/dispatcher.ts's Dispatcher): the gateway's own port, so the room imports no lifecycle code. */
export interface DispatchPort {
  dispatch(scope: string, orders: string): Promise<void>;
}

/**
 * What the scripts are told of the fair share (O.level, O.capacity; src/lib/engine/flow/fair-share.ts):
 * the water level while scopes contend, and the live workers' slots.
 */
export interface FairLevel { level?: number; capacity?: number }

/**
 * The transitions whose loss in a failover would break a promise: an accepted run, a step's
 * result or its start marker (a non-idempotent step must not run again), a stream's events
 * (a reader must find again what it was sent), a turn's history, a wait's resolution, an
 * operator's resolution, a cancel, a delete (lost, a run answered deleted could be read
 * again), and a steering message's delivery (lost, the next model call
 * made with it could be followed by a second delivery at a later boundary). Of the schedules' and bulk operations' own: a schedule's
 * pause and resume and a bulk operation's creation and stop (what the API answered would be
 * undone: a paused schedule would fire again, a stopped operation go on), and a tick's done
 * mark, which says the tick is over: lost, the tick is pending again and submitted again, and
 * only its idempotency key (kept a day) stands between that and a second run; a tick refused,
 * and shown so, could still make one. With REDIS_MIN_REPLICAS_ACK, each answers only once that
 * many replicas hold it (replica-acks.ts). The others are repaired after a failover that lost
 * them: a lost heartbeat, park, retry or hand-over leaves a lease that runs out, and the run is
 * taken over from its memoized steps; a lost tick claim lets the tick be
 * claimed again, and its submit's idempotency key answers the run made the first time; a lost
 * bulk claim or commit has the batch done again from the cursor it started at (a cancel of an
 * ended run changes nothing, a re-run's key answers the re-run already made), and only a commit
 * counts, so each run is still counted once.
 */
const REPLICATED: ReadonlySet<ScriptName> = new Set([
  'submit', 'step', 'steer', 'append', 'finish', 'resume', 'resolve', 'cancel', 'delete', 'fork', 'fork-copy',
  'schedule-pause', 'schedule-resume', 'schedule-done', 'bulk-create', 'bulk-cancel',
]);

/** The shared caller every unit takes: the connection, keys and config, the options every script shares, acks and dispatch. */
export class ScriptCaller {
  /** The limits every script shares, the first fields of its options (they never change). */
  private readonly limits: Record<string, unknown>;
  /** Replica acknowledgements the REPLICATED transitions wait for (absent: none asked). */
  private readonly acks: ReplicaAcks | undefined;
  /** Sends a notification the scripts held for the replicas, as they would have (LIVE_PUBSUB). */
  private readonly publishLive: (channel: string, message: string) => Promise<unknown>;

  constructor(
    readonly redis: Redis,
    readonly keys: Keys,
    readonly config: Config,
    private readonly dispatcher: DispatchPort,
    /** The fair share this process knows (src/lib/engine/flow/fair-share.ts): level while scopes contend, live workers' slots. */
    private readonly fairLevel: () => FairLevel = () => ({}),
  ) {
    this.limits = {
      // As text: it is only ever an XADD argument, and Lua formats a number each time it passes one.
      maxLen: String(config.EVENTS_MAX_LEN),
      maxActive: config.MAX_ACTIVE_PER_SCOPE,
      maxActivePerKey: config.MAX_ACTIVE_PER_KEY,
      weight: config.SCOPE_WEIGHT,
      priorityStepMs: config.PRIORITY_STEP_MS,
      limit: { rate: config.SUBMIT_RATE_PER_SEC, burst: config.SUBMIT_BURST },
      graceMs: config.DISPATCH_GRACE_MS,
      retention: config.RETENTION_MS,
      cancelChannel: keys.cancelChannel,
      // Only when set: these options go with every call, the append's too.
      ...(config.LIVE_PUBSUB === 'sharded' && { spublish: true }),
      storage: {
        queued: config.MAX_QUEUED_RUNS_PER_SCOPE, bytes: config.STORAGE_MAX_BYTES_PER_SCOPE,
        forks: config.FORKS_PER_MINUTE, forkBytes: config.FORK_BYTES_PER_MINUTE,
      },
    };
    this.publishLive = config.LIVE_PUBSUB === 'sharded' ? (ch, m) => redis.spublish(ch, m) : (ch, m) => redis.publish(ch, m);
    if (config.REDIS_MIN_REPLICAS_ACK > 0) {
      this.acks = new ReplicaAcks(redis, config.REDIS_MIN_REPLICAS_ACK, config.REDIS_REPLICA_ACK_TIMEOUT_MS);
    }
  }

  /**
   * Calls a script: FCALL with its keys by name and one options JSON (loading the library into
   * a server that lacks it), replica acknowledgements when asked, and the reply decoded by the
   * unit's `replies` (UNDECODED: left to the unit; claim's has two shapes, append's one per run).
   * `scope` null: a script of no scope (rate-bucket), told only its own options.
   */
  async call<R extends Replies>(
    name: ScriptName, replies: R, scope: string | null, keys: NamedKeys, options: Record<string, unknown>, payload?: Payload,
  ): Promise<Reply<R>>;
  async call(
    name: ScriptName, replies: typeof UNDECODED, scope: string | null, keys: NamedKeys, options: Record<string, unknown>, payload?: Payload,
  ): Promise<unknown>;
  async call(
    name: ScriptName, replies: Replies | typeof UNDECODED, scope: string | null, keys: NamedKeys, options: Record<string, unknown>,
    payload: Payload = [],
  ): Promise<unknown> {
    const acks = scope === null ? undefined : this.acks;
    // With replica acknowledgements, a call's notifications come back with its reply (lib/events.lua's
    // withDeferred) and are published only once replicas hold what they announce.
    const mark = acks?.mark();
    const fn = functionName(name);
    const own = acks ? { ...options, deferPublish: true } : options;
    const args = wire(keys, scope === null ? { json: JSON.stringify({ base: '', ...own }) } : this.options(this.keys.scope(scope).base, own), payload);
    const raw = await this.redis.fcall(fn, ...args).catch(async (err: unknown) => {
      if (!isMissingLibrary(err)) throw err;
      await loadLibrary(this.redis);
      return this.redis.fcall(fn, ...args);
    });
    let reply = raw;
    if (acks && mark !== undefined && scope !== null) {
      const deferred = deferredOf(raw);
      reply = deferred.reply;
      if (deferred.messages.length > 0 || REPLICATED.has(name)) await acks.confirm(mark);
      if (deferred.messages.length > 0) {
        const channel = this.keys.scope(scope).live;
        await Promise.all(deferred.messages.map((m) => this.publishLive(channel, m)));
      }
    }
    return replies === UNDECODED ? reply : decode(name, replies, reply);
  }

  /** The options argument: shared limits, the scope base and the call's own fields, one JSON object. */
  options(base: string, own: Record<string, unknown>): OptionsJson {
    return { json: JSON.stringify({ ...this.limits, ...this.fairLevel(), base, ...own }) };
  }

  /** Adds the BullMQ jobs a transition asked for (dispatch orders, JSON text); returns whether there were any. */
  async dispatch(scope: string, orders: string): Promise<boolean> {
    // Lua's cjson encodes an empty list as `{}`.
    if (orders === '[]' || orders === '{}') return false;
    await this.dispatcher.dispatch(scope, orders);
    return true;
  }
}

/** A reply as withDeferred (lib/events.lua) hands it back: the script's own, and the notifications it held. */
function deferredOf(raw: unknown): { reply: unknown; messages: string[] } {
  if (Array.isArray(raw) && raw[0] === 'baton:deferred') return { reply: raw[1], messages: raw.slice(2).map(String) };
  return { reply: raw, messages: [] };
}

/** The keys of a run and of its scope's slot bookkeeping, which most transitions touch. */
export function slotKeys(sk: ScopeKeys, runId?: string): NamedKeys {
  return {
    run: runId === undefined ? undefined : sk.run(runId), meta: sk.meta, ready: sk.ready, leases: sk.leases,
    timers: sk.timers,
  };
}

/** The keys of a run's lease (retry, release). */
export function leaseKeys(a: Attempt): NamedKeys {
  return { run: a.runKey, leases: a.keys.leases };
}

/** The keys of a run's waits (resume, wait-timeout). */
export function waitKeys(c: ScriptCaller, scope: string, runId: string): NamedKeys {
  const sk = c.keys.scope(scope);
  return { ...slotKeys(sk, runId), steps: sk.steps(runId), waits: sk.waits(runId) };
}
