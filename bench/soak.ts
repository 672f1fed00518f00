import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { createKeys } from '../src/lib/keys.ts';
import type { SessionMessage } from '../src/lib/transitions/record.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { startSentinels, type SentinelSetup } from '../test/helpers/sentinel.ts';
import { startRestartableRedis, type RestartableRedis } from './restartable-redis.ts';
import { SOAK_WORDS } from './soak-agent.ts';
import { checkSoak, type AcceptedRun, type CheckStats, type SessionLog, type StreamLog, type WaitResumes } from './soak-check.ts';
import { jsonCall, readStream, type Reply } from './soak-client.ts';
import { Fleet, logTail, type Kind } from './soak-fleet.ts';

/**
 * The chaos soak: many sessions in several scopes submit runs of the soak agent (memoized
 * steps with side effects, a non-idempotent tool, a wait and an approval the driver answers
 * at random moments, streamed tokens) through `baton api`
 * processes to `baton worker` processes, while a chaos driver SIGKILLs and restarts
 * workers, APIs and redis-server itself (append-only, fsync always). Then it lets
 * everything settle and checks what a user would notice (see soak-check.ts).
 *
 * `npm run soak` runs it from the command line (SOAK_* variables below); the test suite
 * runs a shortened one (test/soak.test.ts).
 */
export interface SoakOptions {
  /** How long runs are submitted while processes and Redis are killed. */
  durationMs: number;
  scopes: number;
  sessionsPerScope: number;
  workers: number;
  apis: number;
  /** Mean pause between kills of a worker, of an API, and between Redis restarts. */
  workerKillEveryMs: number;
  apiKillEveryMs: number;
  redisRestartEveryMs: number;
  /** Share of runs followed by a streaming client (the others are polled). */
  streamShare: number;
  /** Chance that a streaming connection hangs up by itself after a few events. */
  dropChance: number;
  /** After the chaos, how long every accepted run gets to reach a terminal status. */
  settleTimeoutMs: number;
  /**
   * `restart`: one redis-server (append-only, fsync always) that the chaos SIGKILLs and starts
   * again. `sentinel`: a primary, two replicas and three Sentinels (test/helpers/sentinel.ts);
   * the chaos SIGKILLs the primary, a Sentinel promotes a replica, and the killed node rejoins
   * as a replica of the new one.
   */
  redisMode: 'restart' | 'sentinel';
  /** REDIS_MIN_REPLICAS_ACK for every process (sentinel mode). */
  minReplicasAck: number;
  /** QUEUE_PARTITIONS for every worker: the runtime's queues split in this many (docs/operations.md#queue-partitions). */
  queuePartitions: number;
  /**
   * Sentinel mode: how the primary goes. `kill`: SIGKILL (a crash; the node rejoins as a
   * replica). `switch`: a planned SENTINEL FAILOVER with no write pause, which promotes a
   * replica while the old primary still takes writes (docs/operations.md#redis-sentinel).
   */
  failover: 'kill' | 'switch';
  /** Progress lines; the final report is returned, not printed. */
  log: (line: string) => void;
}

/** One primary kill of the sentinel mode, and how long the service took to come back from it. */
export interface Failover {
  /** From the kill to every Sentinel naming a new primary that says it is one. */
  promotedMs: number;
  /** From the kill to the first submit answered 202/200 whose request was sent after the kill. */
  firstSubmitMs?: number;
  /** From the kill to the first event a reader got that a run wrote after the kill (its id's time). */
  firstEventMs?: number;
}

export interface SoakReport extends CheckStats {
  durationMs: number;
  chaosMs: number;
  workerKills: number;
  apiKills: number;
  redisRestarts: number;
  redisMode: SoakOptions['redisMode'];
  minReplicasAck: number;
  queuePartitions: number;
  failovers: Failover[];
  /** Accepted runs (202/200) whose record is gone at the end: what a failover lost. */
  lostRuns: number;
  submitRetries: number;
  violations: string[];
  /** Kept when there are violations: process logs and Redis data for the investigation. */
  dir?: string;
}

export const DEFAULTS: SoakOptions = {
  durationMs: 5 * 60_000,
  scopes: 3,
  sessionsPerScope: 4,
  workers: 3,
  apis: 2,
  workerKillEveryMs: 6_000,
  apiKillEveryMs: 10_000,
  redisRestartEveryMs: 20_000,
  streamShare: 0.6,
  dropChance: 0.3,
  settleTimeoutMs: 120_000,
  redisMode: 'restart',
  minReplicasAck: 0,
  queuePartitions: 1,
  failover: 'kill',
  log: () => {},
};

const AGENT = fileURLToPath(new URL('./soak-agent.ts', import.meta.url));
const RUNTIME = 'soak';
/** A session submits its next run while at most this many of its runs are unfinished (FIFO queueing). */
const MAX_UNFINISHED_PER_SESSION = 2;

/** Resolves after `ms`, or at once when `signal` aborts. */
const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  if (signal?.aborted) return resolve();
  const done = () => { clearTimeout(t); signal?.removeEventListener('abort', done); resolve(); };
  const t = setTimeout(done, ms);
  signal?.addEventListener('abort', done, { once: true });
});
const jitter = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));
const pick = <T>(list: T[]): T | undefined => list[Math.floor(Math.random() * list.length)];
/** Exponentially distributed pauses: kills come at random, sometimes close together. */
const randomPause = (mean: number) => Math.min(mean * 4, Math.round(-Math.log(1 - Math.random()) * mean));

export async function runSoak(partial: Partial<SoakOptions> = {}): Promise<SoakReport> {
  const o: SoakOptions = { ...DEFAULTS, ...partial };
  const started = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'baton-soak-'));
  const logDir = join(dir, 'logs');
  mkdirSync(logDir);
  const prefix = `soak-${randomBytes(4).toString('hex')}`;
  const keys = createKeys(prefix);
  const scopes = Array.from({ length: o.scopes }, (_, i) => `tenant-${i + 1}`);
  const apiKeys = new Map(scopes.map((s) => [s, `bk_soak_${s}_${randomBytes(12).toString('hex')}`]));

  let redisServer: RestartableRedis | undefined;
  let sentinels: SentinelSetup | undefined;
  let redis: Redis | undefined;
  let fleet: Fleet | undefined;
  let kept = false;
  try {
    let url: string;
    if (o.redisMode === 'sentinel') {
      sentinels = await startSentinels();
      url = sentinels.url;
      redis = createRedis({ url, name: 'soak', blocking: true });
    } else {
      redisServer = await startRestartableRedis(join(dir, 'redis'));
      url = redisServer.url;
      redis = new Redis(url, { maxRetriesPerRequest: null, retryStrategy: () => 100 });
    }
    redis.on('error', () => {});
    const server = redisServer;
    const setup = sentinels;
    fleet = new Fleet({
      env: {
        REDIS_URL: url,
        REDIS_MIN_REPLICAS_ACK: String(o.minReplicasAck),
        QUEUE_PARTITIONS: String(o.queuePartitions),
        BATON_KEY_PREFIX: prefix,
        RUNTIME,
        PORT: '0',
        METRICS_PORT: '0',
        LOG_LEVEL: 'warn',
        LEASE_MS: '2000',
        SWEEP_INTERVAL_MS: '500',
        DISPATCH_GRACE_MS: '1500',
        RETRY_BASE_MS: '100',
        RETRY_MAX_MS: '1000',
        SHUTDOWN_GRACE_MS: '2000',
        // The soak submits far faster than a person types; the rate limit is not under test.
        SUBMIT_RATE_PER_SEC: '0',
        // The soak agent reads its turn off the whole history (a lost or doubled turn shows as
        // a wrong turn number), so sessions longer than the default bound are handed whole.
        HISTORY_READ_MAX: '100000',
        BATON_BOOTSTRAP_KEYS: scopes.map((s) => `${s}:admin:${apiKeys.get(s)}`).join(','),
      },
      agents: [AGENT],
      logDir,
    });
    const f = fleet;
    o.log(setup
      ? `soak: redis ${url} (a primary, two replicas, three Sentinels; REDIS_MIN_REPLICAS_ACK=${o.minReplicasAck}; ` +
        `primaries ${o.failover === 'kill' ? 'SIGKILLed' : 'switched away from'}), prefix ${prefix}, logs in ${logDir}`
      : `soak: redis ${url} (appendfsync always), prefix ${prefix}, logs in ${logDir}`);
    // Operator limits in the mix: the first scope one run at a time and one per key, the
    // second three at a time with twice the weight; the others the defaults.
    for (const [i, limits] of [{ maxActive: 1, maxActivePerKey: 1 }, { maxActive: 3, weight: 2 }].entries()) {
      if (scopes[i]) await redis.hset(keys.scope(scopes[i]).limits, limits);
    }
    await Promise.all([
      ...Array.from({ length: o.apis }, () => f.start('api')),
      ...Array.from({ length: o.workers }, () => f.start('worker')),
    ]);

    const state = {
      stopSubmitting: false,
      /** Ends the chaos loops (their pauses too). */
      chaos: new AbortController(),
      /** Ends the streaming and polling clients and the resolver. */
      clients: new AbortController(),
      /** The hard deadline: calls to the API give up, so nothing hangs past it. */
      deadline: new AbortController(),
      workerKills: 0,
      apiKills: 0,
      redisRestarts: 0,
      /** Primary kills (sentinel mode), each with its kill time and what came back when. */
      failovers: [] as (Failover & { killedAt: number })[],
      submitRetries: 0,
      submitErrors: [] as string[],
      clientNotes: [] as string[],
    };
    // Every open stream listens on the clients' signal: hundreds of listeners are expected.
    setMaxListeners(0, state.clients.signal);
    const auth = (scope: string) => ({ authorization: `Bearer ${apiKeys.get(scope)}` });
    /** A call to any live API, tried again on another one until it gets an HTTP answer. */
    const anyApi = async (
      scope: string, method: string, path: string, body?: unknown, signal = state.deadline.signal, onRetry = () => {},
    ): Promise<Reply> => {
      for (let tries = 0; ; tries++) {
        if (signal.aborted) return { status: 0, body: { error: { code: 'GAVE_UP' } } };
        if (tries > 0) onRetry();
        const api = pick(f.apis);
        if (api) {
          const reply = await jsonCall(`${api.url}/v1/scopes/${scope}${path}`, method, auth(scope), body);
          if (reply.status !== 0 && reply.status !== 503) return reply;
        }
        await sleep(jitter(100, 300));
      }
    };

    const sessions: SessionLog[] = scopes.flatMap((scope) =>
      Array.from({ length: o.sessionsPerScope }, (_, i) => ({ scope, sessionId: `chat-${i + 1}`, runs: [] as AcceptedRun[] })));
    const streams: StreamLog[] = [];
    const followers: Promise<void>[] = [];
    const resumes = new Map<string, WaitResumes>();
    const terminal = new Set(['succeeded', 'failed', 'cancelled']);

    /** Submits until an API answers 202/200: the same idempotency key makes a retry safe. */
    const submit = async (s: SessionLog, index: number): Promise<AcceptedRun | undefined> => {
      const words = Array.from({ length: jitter(4, 10) }, () => pick(SOAK_WORDS)!);
      const input = `${s.sessionId} #${index} ${words.join(' ')}`;
      const idempotencyKey = `${s.scope}.${s.sessionId}.${index}`;
      // Flow control in the mix: priorities and concurrency keys vary by run (the same for its
      // retries, which carry the same idempotency key), under the scopes' limits set below.
      const body = {
        sessionId: s.sessionId, input: { content: input }, runtime: RUNTIME, agent: 'soak', idempotencyKey,
        priority: (index * 7) % 10, concurrencyKey: `user-${index % 3}`,
      };
      for (;;) {
        const sentAt = Date.now();
        const reply = await anyApi(s.scope, 'POST', '/runs', body, undefined, () => state.submitRetries++);
        if (reply.status === 202 || reply.status === 200) {
          for (const f of state.failovers) {
            if (f.firstSubmitMs === undefined && sentAt > f.killedAt) f.firstSubmitMs = Date.now() - f.killedAt;
          }
          return { id: reply.body.id, scope: s.scope, sessionId: s.sessionId, index, input, idempotencyKey };
        }
        if (state.deadline.signal.aborted) {
          state.submitErrors.push(`submit ${idempotencyKey}: abandoned at the deadline, its outcome is unknown`);
          return undefined;
        }
        if (reply.status === 429 || reply.status >= 500) {
          state.submitRetries++;
          await sleep(jitter(100, 400));
          continue;
        }
        state.submitErrors.push(`submit ${idempotencyKey}: ${reply.status} ${JSON.stringify(reply.body)}`);
        return undefined;
      }
    };

    /** Follows a run's event stream like a flaky client: drops, API deaths, Last-Event-ID resumes. */
    const stream = async (run: AcceptedRun, done: () => void): Promise<void> => {
      const st: StreamLog = { runId: run.id, scope: run.scope, events: [], connections: 0, drops: 0, ended: false };
      streams.push(st);
      try {
        while (!st.ended && !state.clients.signal.aborted) {
          const api = pick(f.apis);
          if (!api) { await sleep(200); continue; }
          st.connections++;
          const read = await readStream(`${api.url}/v1/scopes/${run.scope}/runs/${run.id}/events`, auth(run.scope), {
            afterId: st.events.at(-1)?.id,
            dropAfter: Math.random() < o.dropChance ? jitter(1, 12) : undefined,
            signal: state.clients.signal,
            onEvent: (e) => {
              st.events.push(e);
              const writtenAt = Number(e.id.split('-')[0]);
              for (const f of state.failovers) {
                if (f.firstEventMs === undefined && writtenAt > f.killedAt) f.firstEventMs = Date.now() - f.killedAt;
              }
            },
          });
          st.ended = read.ended;
          if (read.dropped) st.drops++;
          if (read.status !== 200 && read.status !== 0 && read.status !== 503) {
            state.clientNotes.push(`stream ${run.id}: HTTP ${read.status}`);
          }
          if (!st.ended) await sleep(jitter(20, 250));
        }
      } finally {
        done();
      }
    };

    /** Follows a run by polling it, as a client that does not stream would. */
    const poll = async (run: AcceptedRun, done: () => void): Promise<void> => {
      try {
        while (!state.clients.signal.aborted) {
          const reply = await anyApi(run.scope, 'GET', `/runs/${run.id}`, undefined, state.clients.signal);
          if (reply.status === 200 && terminal.has(reply.body.status)) return;
          await sleep(jitter(300, 700), state.clients.signal);
        }
      } finally {
        done();
      }
    };

    const sessionLoop = async (s: SessionLog): Promise<void> => {
      let unfinished = 0;
      for (let index = 0; !state.stopSubmitting; index++) {
        while (unfinished >= MAX_UNFINISHED_PER_SESSION && !state.stopSubmitting) await sleep(50);
        if (state.stopSubmitting) return;
        const run = await submit(s, index);
        if (!run) return;
        s.runs.push(run);
        unfinished++;
        const done = () => { unfinished--; };
        followers.push(Math.random() < o.streamShare ? stream(run, done) : poll(run, done));
        await sleep(jitter(0, 300));
      }
    };

    /** The operator: resolves blocked runs with the tool's result, so they can finish. */
    const resolver = async (): Promise<void> => {
      const signal = state.clients.signal;
      while (!signal.aborted) {
        for (const scope of scopes) {
          const page = await anyApi(scope, 'GET', '/runs?status=blocked&limit=200', undefined, signal);
          if (page.status !== 200) continue;
          for (const run of page.body.runs as { id: string; blocked?: { stepKey: string } }[]) {
            const stepKey = run.blocked?.stepKey;
            if (!stepKey) continue;
            const reply = await anyApi(scope, 'POST', `/runs/${run.id}/steps/${stepKey}/resolve`, { value: { notified: run.id } }, signal);
            if (reply.status === 200) o.log(`soak: resolved blocked run ${run.id} (${stepKey})`);
          }
        }
        await sleep(1000, signal);
      }
    };

    /** The wait token route of any live API (no key: the token is the credential). */
    const anyToken = async (token: string, body: unknown, signal: AbortSignal): Promise<Reply> => {
      for (;;) {
        if (signal.aborted) return { status: 0, body: { error: { code: 'GAVE_UP' } } };
        const api = pick(f.apis);
        if (api) {
          const reply = await jsonCall(`${api.url}/v1/waits/${encodeURIComponent(token)}`, 'POST', {}, body);
          if (reply.status !== 0 && reply.status !== 503) return reply;
        }
        await sleep(jitter(100, 300));
      }
    };

    /**
     * The people: answer the runs' waits at random moments while the chaos goes on (a pass
     * every 0.2-0.9 s; each pending wait answered with even odds per pass), half the time
     * through the wait's resume token instead of a key. The confirmation gets the run's id,
     * the approval a yes; every answer's status is kept for the checker.
     */
    const answerer = async (): Promise<void> => {
      const signal = state.clients.signal;
      while (!signal.aborted) {
        for (const scope of scopes) {
          const page = await anyApi(scope, 'GET', '/runs?status=waiting&limit=200', undefined, signal);
          if (page.status !== 200) continue;
          for (const run of page.body.runs as { id: string; waits?: { key: string; kind: string; token?: string }[] }[]) {
            for (const w of run.waits ?? []) {
              if (Math.random() < 0.5 || signal.aborted) continue;
              const value = w.kind === 'approval' ? { approved: true } : { confirm: run.id };
              const id = `${run.id} ${w.key}`;
              const log = resumes.get(id) ?? { runId: run.id, waitKey: w.key, statuses: [], byToken: 0 };
              resumes.set(id, log);
              const byToken = w.token !== undefined && Math.random() < 0.5;
              const reply = byToken
                ? await anyToken(w.token!, { value }, signal)
                : await anyApi(scope, 'POST', `/runs/${run.id}/waits/${encodeURIComponent(w.key)}`, { value }, signal);
              if (reply.status === 0) continue;
              log.statuses.push(reply.status);
              if (reply.status === 200 && byToken) log.byToken++;
            }
          }
        }
        await sleep(jitter(200, 900), signal);
      }
    };

    const chaos = async (kind: Kind | 'redis', mean: number): Promise<void> => {
      const signal = state.chaos.signal;
      // The first fault of each kind comes early, so even a short soak sees every kind.
      await sleep(jitter(mean * 0.2, mean * 0.6), signal);
      while (!signal.aborted) {
        if (kind === 'redis' && setup) {
          const killedAt = Date.now();
          const old = o.failover === 'switch' ? await setup.switchPrimary() : await setup.killPrimary();
          const failover: Failover & { killedAt: number } = { killedAt, promotedMs: 0 };
          state.failovers.push(failover);
          const promoted = await setup.waitForFailover(old, 60_000);
          failover.promotedMs = Date.now() - killedAt;
          o.log(`soak: ${o.failover === 'switch' ? 'switched from' : 'killed'} primary ${old.name}; ${promoted.name} promoted after ${failover.promotedMs} ms`);
          if (o.failover === 'kill') {
            await sleep(jitter(500, 3000));
            await setup.restart(old, 60_000);
            o.log(`soak: ${old.name} rejoined as a replica`);
          } else {
            await setup.waitSettled(60_000);
          }
        } else if (kind === 'redis') {
          await server!.kill();
          await sleep(jitter(100, 1500));
          await server!.start();
          state.redisRestarts++;
          o.log(`soak: redis restarted (#${state.redisRestarts})`);
        } else {
          const victim = pick(kind === 'api' ? f.apis : f.workers);
          if (victim) {
            await f.kill(victim);
            if (kind === 'api') state.apiKills++;
            else state.workerKills++;
            o.log(`soak: killed ${victim.name}`);
            // Sometimes the replacement takes a while, as a rescheduled pod does.
            if (Math.random() < 0.3) await sleep(jitter(500, 3000));
            await f.start(kind);
          }
        }
        await sleep(randomPause(mean), signal);
      }
    };

    const chaosStarted = Date.now();
    o.log(`soak: ${o.apis} APIs and ${o.workers} workers up after ${Math.round((chaosStarted - started) / 1000)} s; chaos for ${Math.round(o.durationMs / 1000)} s`);
    const resolving = Promise.all([resolver(), answerer()]);
    const sessionLoops = sessions.map(sessionLoop);
    let chaosFailure: unknown;
    const chaosLoops = [
      chaos('worker', o.workerKillEveryMs), chaos('api', o.apiKillEveryMs), chaos('redis', o.redisRestartEveryMs),
    ].map((p) => p.catch((err) => { chaosFailure ??= err; state.chaos.abort(); }));
    await sleep(o.durationMs, state.chaos.signal);
    state.chaos.abort();
    await Promise.all(chaosLoops);
    // Nothing may hang past the settle time: at the deadline every client gives up.
    const deadline = setTimeout(() => { state.deadline.abort(); state.clients.abort(); }, o.settleTimeoutMs + 30_000);
    if (chaosFailure) {
      clearTimeout(deadline);
      state.deadline.abort();
      state.clients.abort();
      await Promise.all([...sessionLoops, resolving]);
      throw chaosFailure;
    }
    if (server && !server.running) await server.start();
    for (const node of setup?.nodes ?? []) if (!node.running) await setup!.restart(node, 60_000);
    const chaosMs = Date.now() - chaosStarted;
    o.log(`soak: chaos over after ${Math.round(chaosMs / 1000)} s; settling`);
    state.stopSubmitting = true;
    await Promise.all(sessionLoops);

    // Every accepted run must now reach a terminal status on its own (blocked ones through the resolver).
    const accepted = sessions.flatMap((s) => s.runs);
    const settleBy = Date.now() + o.settleTimeoutMs;
    let open = accepted;
    while (open.length && Date.now() < settleBy) {
      const pipe = redis.pipeline();
      for (const r of open) pipe.hget(keys.scope(r.scope).run(r.id), 'status');
      const statuses = (await pipe.exec()) ?? [];
      open = open.filter((_, i) => !terminal.has(String(statuses[i]?.[1])));
      if (open.length) await sleep(500);
    }
    // Clients finish once their run ended; give the last reconnects a moment.
    await Promise.race([Promise.all(followers), sleep(15_000)]);
    state.clients.abort();
    clearTimeout(deadline);
    await Promise.all([...followers, resolving]);

    const messages = async (scope: string, sessionId: string): Promise<SessionMessage[]> => {
      const all: SessionMessage[] = [];
      let cursor: string | null = '0';
      while (cursor !== null) {
        const page = await anyApi(scope, 'GET', `/sessions/${sessionId}/messages?limit=500&cursor=${cursor}`, undefined, AbortSignal.timeout(60_000));
        if (page.status !== 200) throw new Error(`messages of ${scope}/${sessionId}: HTTP ${page.status}`);
        all.push(...(page.body.messages as SessionMessage[]));
        cursor = page.body.nextCursor;
      }
      return all;
    };
    // A run whose record is gone was lost with the primary that had it (a failover without acknowledgements).
    const exists = redis.pipeline();
    for (const r of accepted) exists.exists(keys.scope(r.scope).run(r.id));
    const lostRuns = ((await exists.exec()) ?? []).filter(([, n]) => Number(n) === 0).length;
    const { violations, stats } = await checkSoak({ redis, prefix, sessions, streams, messages, resumes });
    // Every run ended: no scope may still count a slot, a key's slot or a parked run.
    for (const scope of scopes) {
      const sk = keys.scope(scope);
      const meta = await redis.hgetall(sk.meta);
      const held = Object.entries(meta).filter(([f, v]) => (f === 'active' || f === 'parked' || f.startsWith('key:')) && Number(v) !== 0);
      if (held.length) violations.push(`${scope}: slots still counted after every run ended: ${JSON.stringify(Object.fromEntries(held))}`);
      if (await redis.exists(sk.ready, `${sk.base}ready:capped`)) violations.push(`${scope}: keys still in line for slots after every run ended`);
    }
    violations.push(...state.submitErrors);
    for (const c of fleet.crashes) {
      violations.push(`${c.name} crashed on its own (${c.code ?? c.signal}); last log lines:\n${logTail(c.logFile)}`);
    }
    if (state.clientNotes.length) o.log(`soak: client notes:\n  ${state.clientNotes.slice(0, 20).join('\n  ')}`);
    kept = violations.length > 0;
    return {
      ...stats,
      durationMs: Date.now() - started,
      chaosMs,
      workerKills: state.workerKills,
      apiKills: state.apiKills,
      redisRestarts: state.redisRestarts,
      redisMode: o.redisMode,
      minReplicasAck: o.minReplicasAck,
      queuePartitions: o.queuePartitions,
      failovers: state.failovers.map(({ killedAt: _, ...f }) => f),
      lostRuns,
      submitRetries: state.submitRetries,
      violations,
      dir: kept ? dir : undefined,
    };
  } finally {
    await fleet?.stopAll();
    redis?.disconnect();
    await redisServer?.stop();
    await sentinels?.stop();
    if (!kept) rmSync(dir, { recursive: true, force: true });
  }
}

/** The report as printed by `npm run soak` and the test. */
export function formatReport(r: SoakReport): string {
  const lines = [
    `duration ${(r.durationMs / 1000).toFixed(0)} s (chaos ${(r.chaosMs / 1000).toFixed(0)} s)`,
    `runs ${r.runs} accepted, ${r.succeeded} succeeded; ${r.retriedRuns} needed another attempt, ${r.recoveries} lease recoveries, ${r.resolvedRuns} blocked and resolved`,
    r.redisMode === 'sentinel'
      ? `kills: ${r.workerKills} workers, ${r.apiKills} APIs; failovers ${r.failovers.length} (REDIS_MIN_REPLICAS_ACK=${r.minReplicasAck}); submit retries ${r.submitRetries}`
      : `kills: ${r.workerKills} workers, ${r.apiKills} APIs; Redis restarts ${r.redisRestarts}; submit retries ${r.submitRetries}`,
    ...(r.queuePartitions > 1 ? [`queue partitions: ${r.queuePartitions}`] : []),
    ...r.failovers.map((f, i) => `failover ${i + 1}: promoted after ${f.promotedMs} ms; first accepted submit after ${f.firstSubmitMs ?? 'none'} ms; first event written after the kill read after ${f.firstEventMs ?? 'none'} ms`),
    `accepted runs lost: ${r.lostRuns}`,
    `provider: ${r.providerRequests} requests, ${r.providerApplied} applied; non-idempotent tool executions ${r.toolExecutions}`,
    `waits: ${r.waitsResumed} resumed by the driver (${r.tokenResumes} through a resume token)`,
    `streams: ${r.streamsChecked} clients over ${r.streamConnections} connections; history messages ${r.historyMessages}`,
    `violations: ${r.violations.length}`,
    ...r.violations.slice(0, 50).map((v) => `  - ${v}`),
  ];
  if (r.dir) lines.push(`logs and Redis data kept in ${r.dir}`);
  return lines.join('\n');
}

async function main(): Promise<void> {
  const num = (name: string, def: number) => (process.env[name] ? Number(process.env[name]) : def);
  const report = await runSoak({
    durationMs: num('SOAK_DURATION_MS', DEFAULTS.durationMs),
    scopes: num('SOAK_SCOPES', DEFAULTS.scopes),
    sessionsPerScope: num('SOAK_SESSIONS_PER_SCOPE', DEFAULTS.sessionsPerScope),
    workers: num('SOAK_WORKERS', DEFAULTS.workers),
    apis: num('SOAK_APIS', DEFAULTS.apis),
    redisMode: process.env.SOAK_REDIS === 'sentinel' ? 'sentinel' : 'restart',
    minReplicasAck: num('SOAK_MIN_REPLICAS_ACK', DEFAULTS.minReplicasAck),
    queuePartitions: num('SOAK_QUEUE_PARTITIONS', DEFAULTS.queuePartitions),
    failover: process.env.SOAK_FAILOVER === 'switch' ? 'switch' : 'kill',
    log: (line) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`),
  });
  console.log(`\nchaos soak\n${formatReport(report)}`);
  // Without acknowledgements a failover may lose what the primary had not passed on: the soak
  // measures how much (the docs' table), so its violations are the measurement, not a failure.
  const measuring = report.redisMode === 'sentinel' && report.minReplicasAck === 0;
  if (measuring) console.log('(REDIS_MIN_REPLICAS_ACK=0: what was lost is measured here, not held against the run)');
  process.exitCode = report.violations.length === 0 || measuring ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
