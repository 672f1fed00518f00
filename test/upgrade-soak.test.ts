/**
 * Upgrade soak: the rolling upgrade of upgrade.test.ts under a steady load, then its rollback.
 * The previous release (built from git in a temporary folder, see helpers/releases.ts) and
 * this working tree share one Redis and one key prefix while the fleet goes
 *
 *   old API + 2 old workers → + 2 new workers + new API → old workers SIGTERMed one at a time
 *   → old API SIGTERMed → (rollback) + 2 old workers + old API → new workers SIGTERMed one at
 *   a time → new API SIGTERMed → old processes only,
 *
 * and sessions keep submitting turns, each with its idempotency key, through whichever APIs
 * are in service (a load balancer in the test sends each request to the next; a request an
 * API breaks off as it stops is sent again, same key, to the next). Some sessions read each
 * turn's events live with the client's resuming stream, across the APIs' stops. At the end,
 * with only the previous release's processes left, every accepted run has succeeded exactly
 * once, none is stuck, each session's history is its turns in order, and every stream is
 * whole: the old processes read all that the new ones wrote.
 *
 * Every worker stop hands runs over, without guessing with delays: the workers stopped
 * (the first two old ones, both new ones) run with SESSION_FX_HANG=1, where the fixtures'
 * `mid-answer` stops after its second word until its run is taken from it. Before a stop the
 * test feeds `mid-answer` turns until that worker holds one; such a run can only end on
 * another worker, so each stop hands at least one over (old to new in the upgrade, new to old
 * in the rollback: the last worker of each release to go leaves only the other's).
 */
import { beforeAll, expect, it } from 'vitest';
import { BatonClient, type RunStreamEvent } from '../src/client.ts';
import { ROOT, useHarness, waitFor, type Child, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { checkoutRelease, previousRelease, type ReleaseCheckout } from './helpers/releases.ts';
import { track } from './helpers/resources.ts';
import { expectWholeStream, words } from './helpers/stream-check.ts';

const SCOPE = 'acme';
/** Sessions of the steady load; the first STREAMED of them read every turn's events live. */
const SESSIONS = 8;
const STREAMED = 3;
/** Turns accepted between two moves of the fleet: about two a session. */
const PER_MOVE = 16;
/**
 * Between the echo runs' 10 tokens: runs of about half a second keep the sessions' submits
 * (two turns in flight each) under the scope's default submit rate, and several runs in
 * flight on every worker when it is stopped.
 */
const ECHO_DELAY_MS = 50;
/** The load balancer's origin in the client's URLs: route() sends each request to an API in service. */
const LB = 'http://baton-lb.invalid';
/** Submit answers a client sends again: Redis unavailable, the scope's submit rate. */
const RESEND = new Set([503, 429]);
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

let h: Harness;
let old: ReleaseCheckout;

beforeAll(async () => {
  const release = await previousRelease();
  const checkout = await checkoutRelease(release);
  old = track(checkout, () => checkout.remove());
  // Leases of 5 s (the harness's are 2), as in upgrade.test.ts: a loaded machine that stalls a
  // worker for a moment must not have its runs taken over before the test stops it. A grace of
  // 1 s: the steady load's runs (half a second) mostly end within it, held `mid-answer` runs never do.
  // The scope's slots well above the load's: the `mid-answer` runs fed before a stop that a
  // hanging worker of the other release claims keep their slot until that worker stops, and at
  // the default 8 (MAX_ACTIVE_PER_SCOPE) eight of them would park the sessions' turns behind
  // them for good (CI once saw a turn wait there a minute).
  h = await useHarness({ LEASE_MS: '5000', SHUTDOWN_GRACE_MS: '1000', MAX_ACTIVE_PER_SCOPE: '256' });
  console.log(`upgrade soak from release ${release.version} (${release.sha.slice(0, 7)}, dependencies ${old.dependencies})`);
// An `npm ci` when the lock files differ takes longer than a hook's usual minute.
}, 300_000);

type Version = 'old' | 'new';

interface Api { version: Version; child: Child; url: string }
interface Worker { version: Version; child: Child; id: string }

/** One accepted run: a turn of its session. */
interface Turn {
  sessionId: string;
  key: string;
  content: string;
  agent: 'echo' | 'mid-answer';
  runId: string;
  /** Which release's API answered the submit. */
  via: Version;
  /** How many times the submit was sent again before an API accepted it. */
  resent: number;
  /** 200: a submit sent again after a broken connection found the run the first one made. */
  replayed: boolean;
}

/** The processes in service, and a load balancer over the APIs among them. */
class Fleet {
  apis: Api[] = [];
  /** Connections opened per run's event stream: more than one is a reader that resumed. */
  readonly streamConnections = new Map<string, number>();
  private next = 0;

  /** The next API in service, round robin. */
  pick(): Api {
    if (!this.apis.length) throw new Error('no API in service');
    return this.apis[this.next++ % this.apis.length];
  }

  /** The client's fetch: each request goes to the next API in service. */
  readonly route: typeof fetch = (input, init) => {
    const url = String(input);
    const stream = /\/runs\/([^/]+)\/events$/.exec(url);
    if (stream) this.streamConnections.set(stream[1], (this.streamConnections.get(stream[1]) ?? 0) + 1);
    return fetch(url.replace(LB, this.pick().url), init);
  };

  async startApi(version: Version): Promise<Api> {
    const child = await h.spawn('api', version === 'old' ? { checkout: old.dir } : {});
    const api = { version, child, url: child.url! };
    this.apis.push(api);
    return api;
  }

  /** `hangs`: SESSION_FX_HANG=1, `mid-answer` runs stop mid-answer until taken from this worker. */
  async startWorker(version: Version, hangs: boolean): Promise<Worker> {
    const root = version === 'old' ? old.dir : ROOT;
    const child = await h.spawn('worker', {
      checkout: version === 'old' ? old.dir : undefined,
      agents: [`${root}test/fixtures/session-agents.ts`],
      env: hangs ? { SESSION_FX_HANG: '1' } : {},
    });
    const id = /baton worker (\S+) serving runtime/.exec(child.output())?.[1];
    if (!id) throw new Error(`no worker id in its output:\n${child.output()}`);
    return { version, child, id };
  }

  /**
   * SIGTERM, then out of service once it has exited: until then the load balancer still sends
   * it requests, which it breaks off or refuses, and clients send them again elsewhere.
   */
  async stopApi(api: Api): Promise<void> {
    await stopped(api.child);
    this.apis = this.apis.filter((a) => a !== api);
  }
}

/** SIGTERM, and a clean exit. */
async function stopped(child: Child): Promise<void> {
  await child.kill('SIGTERM');
  expect(child.process.exitCode, child.output()).toBe(0);
}

/** Sessions submitting turn after turn (two in flight each), and the `mid-answer` turns fed before a worker stop. */
class Load {
  readonly turns: Turn[] = [];
  /** Live readers by run id: the events each got, to its `end`. */
  readonly readers = new Map<string, Promise<RunStreamEvent[]>>();
  /** The runs each stopped worker held when it got its SIGTERM. */
  readonly held: { worker: Worker; runs: Turn[] }[] = [];
  private readonly holdSessions: Turn[][] = [];
  /** The `mid-answer` turns, in the order they were fed. */
  readonly holds: Turn[] = [];
  private readonly loops: Promise<void>[] = [];
  private stopping = false;
  /** Where the fleet is, for the messages of a failure. */
  private stage = 'the fleet starting';
  private failure: unknown;

  constructor(private readonly fleet: Fleet, private readonly client: BatonClient, private readonly headers: Record<string, string>) {}

  start(): void {
    for (let i = 0; i < SESSIONS; i++) {
      const loop = this.session(`s${i}`, i < STREAMED).catch((err: unknown) => { this.failure ??= err; });
      this.loops.push(loop);
    }
  }

  /** Waits until PER_MOVE more turns were accepted, some through each release's API in service. */
  async progress(what: string): Promise<void> {
    this.stage = `the fleet ${what}`;
    const from = this.turns.length;
    const versions = new Set(this.fleet.apis.map((a) => a.version));
    await waitFor(() => {
      if (this.failure) throw this.failure;
      const since = this.turns.slice(from);
      return since.length >= PER_MOVE && [...versions].every((v) => since.some((t) => t.via === v));
    }, 60_000, `${PER_MOVE} turns accepted ${what}`);
  }

  /** Stops submitting: each session's loop ends after the submit it is in. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.loops);
    if (this.failure) throw this.failure;
  }

  /**
   * Stops `w` with SIGTERM once it holds a `mid-answer` run. They are fed one at a time, each
   * claimed by some worker before the next goes in; one claimed by a worker that hangs stays
   * there until that worker's own stop, one claimed by a rollback worker just succeeds.
   */
  async stopWorker(w: Worker): Promise<void> {
    const runs = await waitFor(async () => {
      if (this.failure) throw this.failure;
      const held = await this.heldBy(w);
      if (held.length) return held;
      const last = this.holds.at(-1);
      if (!last || !['queued', 'dispatched'].includes(await this.status(last))) await this.feedHold();
      return undefined;
    }, 60_000, `${w.version} worker ${w.id} to hold a mid-answer run`);
    this.held.push({ worker: w, runs });
    await stopped(w.child);
  }

  /** Waits until `t` is terminal (any terminal status: the checks say which it must be). */
  async ended(t: Turn): Promise<void> {
    await waitFor(async () => TERMINAL.has(await this.status(t)), 60_000, `${t.runId} (${t.key}) to end`).catch(async (err: Error) => {
      const sk = h.keys.scope(SCOPE);
      const record = await h.redis.hgetall(sk.run(t.runId));
      // Where admission stands: the scope's counters, the session's head and queue, the parked line.
      const [meta, session, queue, turns] = await Promise.all([
        h.redis.hgetall(sk.meta), h.redis.hgetall(sk.session(t.sessionId)),
        h.redis.lrange(sk.sessionQueue(t.sessionId), 0, -1), h.redis.zrange(sk.ready, 0, -1, 'WITHSCORES'),
      ]);
      throw new Error(`${err.message}; ${this.stage}; its record: ${JSON.stringify(record)}; scope meta ${JSON.stringify(meta)}; ` +
        `session ${JSON.stringify(session)} queue ${JSON.stringify(queue)}; parked keys ${JSON.stringify(turns)}`);
    });
  }

  status(t: Turn): Promise<string> {
    return h.redis.hget(h.keys.scope(SCOPE).run(t.runId), 'status').then((s) => s ?? 'missing');
  }

  /** Two turns of a session in flight at most: the one running and the one queued behind it. */
  private async session(sessionId: string, streamed: boolean): Promise<void> {
    const mine: Turn[] = [];
    while (!this.stopping) {
      if (mine.length >= 2) await this.ended(mine[mine.length - 2]);
      if (this.stopping) break;
      const t = await this.submit(sessionId, 'echo', mine.length);
      mine.push(t);
      if (streamed) this.follow(t);
    }
  }

  /** The next turn of a hold session whose turns have all ended (or of a new one), read live. */
  private async feedHold(): Promise<void> {
    let session: Turn[] | undefined;
    for (const s of this.holdSessions) {
      if (TERMINAL.has(await this.status(s.at(-1)!))) { session = s; break; }
    }
    if (!session) this.holdSessions.push((session = []));
    const t = await this.submit(`hold-${this.holdSessions.indexOf(session)}`, 'mid-answer', session.length);
    session.push(t);
    this.holds.push(t);
    this.follow(t);
  }

  private async heldBy(w: Worker): Promise<Turn[]> {
    const held: Turn[] = [];
    for (const t of this.holds) {
      const [status, owner] = await h.redis.hmget(h.keys.scope(SCOPE).run(t.runId), 'status', 'leaseOwner');
      if (status === 'running' && owner === w.id) held.push(t);
    }
    return held;
  }

  /**
   * Submits turn `n` of `sessionId` through the next API in service. A connection the API
   * broke (it was stopping), a 503 or a 429 (the scope's submit rate, 20/s by default) is
   * sent again, same idempotency key, to the next API.
   */
  private async submit(sessionId: string, agent: Turn['agent'], n: number): Promise<Turn> {
    const key = `${sessionId}.${n}`;
    const content = `${sessionId} turn ${n}: ${words(agent === 'echo' ? 10 : 8, `t${n}-`)}`;
    const body = { sessionId, input: { content }, runtime: h.runtime, agent, idempotencyKey: key, metadata: { delayMs: ECHO_DELAY_MS } };
    let resent = -1;
    const turn = await waitFor(async () => {
      resent++;
      const api = this.fleet.pick();
      const res = await call(api.url, 'POST', `/v1/scopes/${SCOPE}/runs`, body, this.headers).catch((err: Error) => err);
      if (res instanceof TypeError || (!(res instanceof Error) && RESEND.has(res.status))) return undefined;
      if (res instanceof Error) throw res;
      if (res.status !== 202 && res.status !== 200) throw new Error(`submit ${key} via the ${api.version} API: ${res.status} ${JSON.stringify(res.body)}`);
      return { sessionId, key, content, agent, runId: res.body.id as string, via: api.version, resent, replayed: res.status === 200 };
    }, 30_000, `an API to accept ${key}`);
    this.turns.push(turn);
    return turn;
  }

  /** Reads the run's events to `end` with the client's own resumption, through the load balancer. */
  private follow(t: Turn): void {
    const read = (async () => {
      const events: RunStreamEvent[] = [];
      for await (const e of this.client.stream(t.runId)) events.push(e);
      return events;
    })();
    // Awaited at the end; a reader that failed before then must not count as unhandled meanwhile.
    read.catch(() => {});
    this.readers.set(t.runId, read);
  }
}

it('an upgrade and its rollback under load, SIGTERM one process at a time: every run succeeds once, none stuck, histories exact, streams whole', async () => {
  const t0 = Date.now();
  const fleet = new Fleet();
  const { key, headers } = await h.client(LB, SCOPE);
  const client = new BatonClient({ url: LB, apiKey: key, scope: SCOPE, fetch: fleet.route });
  const load = new Load(fleet, client, headers);

  // The previous release alone, under load.
  const [oldApi, old1, old2] = await Promise.all([fleet.startApi('old'), fleet.startWorker('old', true), fleet.startWorker('old', true)]);
  load.start();
  await load.progress('on the previous release');

  // The upgrade: this release's workers, then its API, beside the old processes.
  const [new1, new2] = await Promise.all([fleet.startWorker('new', true), fleet.startWorker('new', true)]);
  const newApi = await fleet.startApi('new');
  await load.progress('on both releases');
  await load.stopWorker(old1);
  await load.progress('after the first old worker');
  await load.stopWorker(old2);
  await load.progress('on old API, new workers');
  await fleet.stopApi(oldApi);
  await load.progress('on this release alone');

  // The rollback: the previous release's workers and API again, then this release's stopped.
  const [old3, old4] = await Promise.all([fleet.startWorker('old', false), fleet.startWorker('old', false)]);
  const oldApiAgain = await fleet.startApi('old');
  await load.progress('on both releases again');
  await load.stopWorker(new1);
  await load.progress('after the first new worker');
  await load.stopWorker(new2);
  await load.progress('on new API, old workers');
  await fleet.stopApi(newApi);
  await load.progress('on the previous release alone');
  await load.stop();

  // Settled: every accepted run ended, every live reader got its `end`.
  const { turns } = load;
  for (const t of turns) await load.ended(t);
  const live = new Map<string, RunStreamEvent[]>();
  for (const [runId, read] of load.readers) live.set(runId, await read);

  // From here on everything is read through the previous release's API, the one in service.
  expect(fleet.apis.length === 1 && fleet.apis[0] === oldApiAgain).toBe(true);
  const api = (path: string) => call(oldApiAgain.url, 'GET', `/v1/scopes/${SCOPE}${path}`, undefined, headers);

  // Each accepted run exists once (one run per idempotency key, none beside them) and succeeded
  // with its input as its answer.
  const listed = await listAll(api);
  expect(listed.map((r) => r.id).sort()).toEqual(turns.map((t) => t.runId).sort());
  expect(new Set(listed.map((r) => r.idempotencyKey)).size).toBe(turns.length);
  const byId = new Map(listed.map((r) => [r.id, r]));
  for (const t of turns) {
    expect(byId.get(t.runId), t.key).toMatchObject({ status: 'succeeded', idempotencyKey: t.key, result: { answer: t.content } });
  }

  // Nothing stuck: the counters both releases kept, as the previous release reads them.
  const { counts } = (await api(`/runtimes/${h.runtime}/stats`)).body;
  const idle = { scheduled: 0, queued: 0, running: 0, retrying: 0, waiting: 0, blocked: 0 };
  expect(counts).toMatchObject({ ...idle, succeeded: turns.length, failed: 0 });

  // Every worker stopped handed its held runs over at the grace deadline (no lease ran out),
  // and another finished them.
  for (const { worker, runs } of load.held) {
    for (const t of runs) {
      expect(byId.get(t.runId)!.recoveries, `${t.key} held by ${worker.version} worker ${worker.id}`).toBeGreaterThanOrEqual(1);
      expect(await h.redis.hget(h.keys.scope(SCOPE).run(t.runId), 'expiredLeases'), t.key).toBeNull();
    }
  }

  // Streams: the live readers' (across the takeovers and the APIs' stops) and, for every other
  // run, one read now through the previous release's API: the whole log, once each, `end` last.
  for (const t of turns) {
    const events = live.get(t.runId) ?? await collect(client.stream(t.runId));
    await expectWholeStream(h, SCOPE, t, events, t.key);
  }

  // Histories: each session's turns, once each, in the order they were accepted.
  for (const sessionId of new Set(turns.map((t) => t.sessionId))) {
    const want = turns.filter((t) => t.sessionId === sessionId).flatMap((t) => [
      { role: 'user', content: t.content, runId: t.runId },
      { role: 'assistant', content: t.content, runId: t.runId },
    ]);
    const { messages, nextCursor } = (await api(`/sessions/${sessionId}/messages?limit=500`)).body;
    expect(nextCursor, sessionId).toBeNull();
    expect(messages.map(({ role, content, runId }: Record<string, string>) => ({ role, content, runId })), sessionId).toEqual(want);
    expect(messages.some((m: { incomplete?: boolean }) => m.incomplete), sessionId).toBe(false);
  }

  await Promise.all([old3, old4].map((w) => stopped(w.child)));
  await fleet.stopApi(oldApiAgain);

  const resent = turns.filter((t) => t.resent > 0);
  const heldAt = (v: Version) => load.held.filter((s) => s.worker.version === v).reduce((n, s) => n + s.runs.length, 0);
  const takeovers = listed.reduce((n, r) => n + r.recoveries, 0);
  const resumed = [...load.readers.keys()].filter((id) => (fleet.streamConnections.get(id) ?? 0) > 1).length;
  console.log(
    `upgrade soak ${old.release.version} -> working tree -> ${old.release.version}: ${turns.length} runs in ` +
    `${new Set(turns.map((t) => t.sessionId)).size} sessions (${turns.filter((t) => t.via === 'old').length} accepted by old APIs, ` +
    `${turns.filter((t) => t.via === 'new').length} by the new one, submits sent again ${resent.length}, answered 200 ${turns.filter((t) => t.replayed).length}), ` +
    `all succeeded once; hand-overs at SIGTERM: ${heldAt('old')} runs held by 2 old workers, ${heldAt('new')} by 2 new ones, ` +
    `${takeovers} takeovers in all (${load.holds.length} mid-answer runs fed); ${live.size} live streams whole (${resumed} resumed on another API); ` +
    `${Math.round((Date.now() - t0) / 1000)} s`,
  );
}, 240_000);

interface ListedRun { id: string; status: string; idempotencyKey?: string; recoveries: number; result?: { answer?: string } }

/** Every run of the scope, page after page. */
async function listAll(api: (path: string) => ReturnType<typeof call>): Promise<ListedRun[]> {
  const runs: ListedRun[] = [];
  let cursor: string | null = null;
  do {
    const res = await api(`/runs?limit=200${cursor ? `&cursor=${cursor}` : ''}`);
    const page = res.body as { runs: ListedRun[]; nextCursor: string | null };
    runs.push(...page.runs);
    cursor = page.nextCursor;
  } while (cursor);
  return runs;
}

async function collect(events: AsyncIterable<RunStreamEvent>): Promise<RunStreamEvent[]> {
  const got: RunStreamEvent[] = [];
  for await (const e of events) got.push(e);
  return got;
}
