/**
 * Rolling upgrade: processes of the previous release (built from git in a temporary folder,
 * see helpers/releases.ts) and of this working tree run side by side against one Redis and
 * one key prefix, while the old ones are replaced. Every accepted run must succeed exactly
 * once, each session's history must hold each turn once and in order, streams read through
 * the new API must be whole, and the old API must read what the new processes wrote.
 *
 * The agents are the built-in `echo` and the fixtures' `mid-answer`, which every release
 * since 0.2.0 has. In a worker started with SESSION_FX_HANG=1, `mid-answer` stops after its
 * second word until its run is taken from it: that is how an old worker is made to hold runs
 * at the moment it is stopped or killed, without guessing with delays.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ROOT, useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import { type SseEvent } from './helpers/http.ts';
import { checkoutRelease, previousOf, previousRelease, type Release, type ReleaseCheckout } from './helpers/releases.ts';
import { track } from './helpers/resources.ts';
import { answerText, expectWholeStream, fullLog, seen, words } from './helpers/stream-check.ts';

const SCOPE = 'acme';

describe('the release a working tree upgrades from', () => {
  const r = (version: string, sha: string): Release => ({ version, sha });
  const history = [r('0.3.0', 'c3'), r('0.2.0', 'c2')];

  it.each([
    ['between releases, package.json still at the last release', history, { version: '0.3.0', head: 'c4' }, 'c3'],
    ["on a release's own commit", history, { version: '0.3.0', head: 'c3' }, 'c2'],
    ['package.json set to the next version before its release commit', history, { version: '0.4.0', head: 'c4' }, 'c3'],
    ["on the first release's own commit", [r('0.2.0', 'c2')], { version: '0.2.0', head: 'c2' }, undefined],
    ['no release yet', [], { version: '0.1.0', head: 'c1' }, undefined],
  ])('%s', (_, releases, tree, expected) => {
    expect(previousOf(releases, tree)?.sha).toBe(expected);
  });
});

let h: Harness;
let old: ReleaseCheckout;

beforeAll(async () => {
  const release = await previousRelease();
  const checkout = await checkoutRelease(release);
  old = track(checkout, () => checkout.remove());
  // Leases of 5 s (the harness's are 2): a loaded machine that stalls an old worker for a
  // moment must not let a new one take its runs over before the test stops or kills it.
  h = await useHarness({ LEASE_MS: '5000' });
  console.log(`upgrade from release ${release.version} (${release.sha.slice(0, 7)}, dependencies ${old.dependencies}) to the working tree`);
// An `npm ci` when the lock files differ takes longer than a hook's usual minute.
}, 300_000);

/** One accepted run: a turn of its session. */
interface Turn {
  sessionId: string;
  content: string;
  runId: string;
  runtime: string;
  /** Which release's API accepted it. */
  via: 'old' | 'new';
}

/** A reader through the new API that follows a run from its first event, live, to its end. */
interface LiveReader { turn: Turn; result: Promise<{ status: number; events: SseEvent[]; ended: boolean }> }

it('the previous release and this one side by side through a rolling upgrade: every run succeeds once, histories exact, streams whole', async () => {
  const t0 = Date.now();
  const runtimeB = `${h.runtime}-b`;
  const oldAgents = `${old.dir}test/fixtures/session-agents.ts`;
  const newAgents = `${ROOT}test/fixtures/session-agents.ts`;
  const turns: Turn[] = [];
  const api = {} as Record<Turn['via'], ScopeClient>;

  /** Submits the next turn of `sessionId`: `echo` streams 20 words 15 ms apart, `mid-answer` 12 words. */
  const submit = async (via: Turn['via'], sessionId: string, agent: 'echo' | 'mid-answer', runtime = h.runtime): Promise<Turn> => {
    const n = turns.filter((t) => t.sessionId === sessionId).length;
    const content = `${sessionId} turn ${n}: ${words(agent === 'echo' ? 20 : 12, `${via}${n}-`)}`;
    const res = await api[via].submit(sessionId, content, { agent, runtime, metadata: { delayMs: 15 } });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    const turn = { sessionId, content, runId: res.body.id as string, runtime, via };
    turns.push(turn);
    return turn;
  };
  const follow = (t: Turn): LiveReader => {
    const result = api.new.sse(`/runs/${t.runId}/events`);
    // Awaited at the end; a reader that failed before then must not count as unhandled meanwhile.
    result.catch(() => {});
    return { turn: t, result };
  };

  // 1. The previous release alone: its API, and a worker whose mid-answer runs stop after two words.
  const oldApi = await h.spawn('api', { checkout: old.dir });
  const oldWorker = await h.spawn('worker', { checkout: old.dir, agents: [oldAgents], env: { SESSION_FX_HANG: '1' } });
  api.old = await h.client(oldApi.url!, SCOPE);
  const handedOver = [await submit('old', 'hand-0', 'mid-answer'), await submit('old', 'hand-1', 'mid-answer')];
  for (const s of ['echo-0', 'echo-1', 'echo-2']) await submit('old', s, 'echo');
  await waitHeld(handedOver, oldWorker);

  // 2. This release beside it, a worker first and then an API; more turns through both APIs,
  // the handed-over sessions' next turns queued behind the runs the old worker holds.
  const newWorker = await h.spawn('worker', { agents: [newAgents] });
  const newApi = await h.spawn('api');
  api.new = await h.client(newApi.url!, SCOPE);
  const live = handedOver.map(follow);
  for (const s of ['hand-0', 'hand-1', 'echo-0', 'echo-1', 'fresh-0']) await submit('new', s, 'echo');
  for (const s of ['echo-0', 'echo-2', 'fresh-0']) await submit('old', s, 'echo');

  // 3. While both run, the old API reads the runs the new API accepted (the old worker ran some).
  const acceptedByNew = turns.filter((t) => t.via === 'new' && !t.sessionId.startsWith('hand-'));
  await waitSucceeded(acceptedByNew);
  await expectOldReadsAsNew(api, acceptedByNew);

  // 4. SIGTERM to the old worker: at its grace deadline it hands the held runs over, and the
  // new worker takes them at once and finishes them, and the turns queued behind them.
  await oldWorker.kill('SIGTERM');
  expect(oldWorker.process.exitCode, oldWorker.output()).toBe(0);
  const afterOldWorker = [await submit('new', 'echo-1', 'echo'), await submit('new', 'fresh-0', 'echo')];
  // The old API reads what only the new worker wrote: the handed-over sessions' turns, the runs
  // after the old worker, and every history so far.
  await waitSucceeded(turns);
  await expectOldReadsAsNew(api, [...turns.filter((t) => t.sessionId.startsWith('hand-')), ...afterOldWorker]);
  await expectSessionsRead([api.old, api.new], turns);

  // 5. Runtime B, where the old worker dies instead: alone, it holds two runs mid-answer; a new
  // worker starts beside it; the old one is SIGKILLed, and the new one recovers its runs once
  // their leases run out, then runs the turns queued behind them.
  const oldWorkerB = await h.spawn('worker', {
    checkout: old.dir, agents: [oldAgents], env: { SESSION_FX_HANG: '1', RUNTIME: runtimeB },
  });
  const crashed = [await submit('old', 'crash-0', 'mid-answer', runtimeB), await submit('new', 'crash-1', 'mid-answer', runtimeB)];
  await submit('old', 'b-echo-0', 'echo', runtimeB);
  await waitHeld(crashed, oldWorkerB);
  const newWorkerB = await h.spawn('worker', { agents: [newAgents], env: { RUNTIME: runtimeB } });
  live.push(...crashed.map(follow));
  await submit('new', 'crash-0', 'echo', runtimeB);
  await submit('old', 'crash-1', 'echo', runtimeB);
  await submit('new', 'b-echo-0', 'echo', runtimeB);
  await oldWorkerB.kill('SIGKILL');

  // 6. The old API goes last (SIGTERM); the last turns go through the new one.
  await oldApi.kill('SIGTERM');
  expect(oldApi.process.exitCode, oldApi.output()).toBe(0);
  for (const s of ['echo-0', 'hand-1', 'fresh-0']) await submit('new', s, 'echo');
  await submit('new', 'crash-0', 'echo', runtimeB);
  await waitSucceeded(turns);

  // Every accepted run exists once and succeeded with its input as its answer.
  const listed = (await api.new.get('/runs?limit=200')).body.runs as { id: string; status: string }[];
  expect(listed.map((r) => r.id).sort()).toEqual(turns.map((t) => t.runId).sort());
  expect(new Set(listed.map((r) => r.status))).toEqual(new Set(['succeeded']));
  for (const t of turns) {
    const run = (await api.new.get(`/runs/${t.runId}`)).body;
    expect(run.result.answer, t.runId).toBe(t.content);
  }
  // The handed-over runs were taken over at shutdown (no lease ran out), the killed worker's by recovery.
  for (const t of handedOver) expect(await leaseRecord(t)).toMatchObject({ recoveries: '1', expiredLeases: null });
  for (const t of crashed) expect(await leaseRecord(t)).toMatchObject({ recoveries: '1', expiredLeases: '1' });

  // Streams through the new API: each run's whole log once, in order, `end` last, and the tokens
  // after the last `attempt` spell the answer; the live readers saw the same across the takeover.
  for (const t of turns) {
    const read = await api.new.sse(`/runs/${t.runId}/events`);
    expect(read.ended, t.runId).toBe(true);
    await expectWholeStream(h, SCOPE, t, seen(read.events));
  }
  for (const reader of live) {
    const read = await reader.result;
    expect(read.ended, reader.turn.runId).toBe(true);
    await expectWholeStream(h, SCOPE, reader.turn, seen(read.events));
  }

  // Histories: every session's turns once each, in the order they were submitted.
  await expectSessionsRead([api.new], turns);

  // Nothing stuck: no run left queued, running, retrying, waiting or blocked on either runtime.
  for (const runtime of [h.runtime, runtimeB]) {
    const { counts } = (await api.new.get(`/runtimes/${runtime}/stats`)).body;
    const ran = turns.filter((t) => t.runtime === runtime).length;
    const idle = { scheduled: 0, queued: 0, running: 0, retrying: 0, waiting: 0, blocked: 0 };
    expect(counts, runtime).toMatchObject({ ...idle, succeeded: ran, failed: 0 });
  }
  await Promise.all([newWorker.kill('SIGTERM'), newWorkerB.kill('SIGTERM'), newApi.kill('SIGTERM')]);
  for (const p of [newWorker, newWorkerB, newApi]) expect(p.process.exitCode, p.output()).toBe(0);

  const sessions = new Set(turns.map((t) => t.sessionId)).size;
  console.log(
    `rolling upgrade ${old.release.version} -> working tree: ${turns.length} runs in ${sessions} sessions, all succeeded once; ` +
    `${handedOver.length} handed over at SIGTERM, ${crashed.length} recovered after SIGKILL; ${live.length} live streams whole; ` +
    `${Math.round((Date.now() - t0) / 1000)} s`,
  );
}, 120_000);

/** Waits until an old worker holds every one of `held`, each stopped mid-answer (its first two words streamed). */
async function waitHeld(held: Turn[], worker: Child): Promise<void> {
  const workerId = /baton worker (\S+) serving runtime/.exec(worker.output())?.[1];
  expect(workerId, worker.output()).toBeDefined();
  for (const t of held) {
    const twoWords = t.content.split(' ').slice(0, 2).join(' ');
    await waitFor(async () => {
      const [status, owner] = await h.redis.hmget(h.keys.scope(SCOPE).run(t.runId), 'status', 'leaseOwner');
      return status === 'running' && owner === workerId && answerText(await fullLog(h, SCOPE, t.runId)) === twoWords;
    }, 30_000, `${workerId} to hold ${t.runId} mid-answer`);
  }
}

async function waitSucceeded(list: Turn[]): Promise<void> {
  for (const t of list) {
    const status = () => h.redis.hget(h.keys.scope(SCOPE).run(t.runId), 'status');
    await waitFor(async () => (await status()) === 'succeeded', 45_000, `${t.runId} to succeed`);
  }
}

async function leaseRecord(t: Turn) {
  const [recoveries, expiredLeases] = await h.redis.hmget(h.keys.scope(SCOPE).run(t.runId), 'recoveries', 'expiredLeases');
  return { recoveries, expiredLeases };
}

/**
 * The old API shows each run as the new one does (the fields both show: a release may add
 * one to the run's view), and streams its whole log.
 */
async function expectOldReadsAsNew(api: Record<Turn['via'], ScopeClient>, list: Turn[]): Promise<void> {
  for (const t of list) {
    const [viaOld, viaNew] = await Promise.all([api.old.get(`/runs/${t.runId}`), api.new.get(`/runs/${t.runId}`)]);
    expect(viaOld.status, t.runId).toBe(200);
    expect(viaOld.body, t.runId).toMatchObject({ id: t.runId, status: 'succeeded', result: { answer: t.content } });
    const shared = Object.keys(viaOld.body).filter((k) => k in viaNew.body);
    const pick = (run: Record<string, unknown>) => Object.fromEntries(shared.map((k) => [k, run[k]]));
    expect(pick(viaOld.body), t.runId).toEqual(pick(viaNew.body));
    const read = await api.old.sse(`/runs/${t.runId}/events`);
    expect(read.ended, t.runId).toBe(true);
    await expectWholeStream(h, SCOPE, t, seen(read.events));
  }
}

/** Every session's history, read through each of `clients`, is its turns in submission order, each once. */
async function expectSessionsRead(clients: ScopeClient[], list: Turn[]): Promise<void> {
  for (const sessionId of new Set(list.map((t) => t.sessionId))) {
    const want = list.filter((t) => t.sessionId === sessionId).flatMap((t) => [
      { role: 'user', content: t.content, runId: t.runId },
      { role: 'assistant', content: t.content, runId: t.runId },
    ]);
    for (const client of clients) {
      const { messages, nextCursor } = (await client.get(`/sessions/${sessionId}/messages?limit=500`)).body;
      expect(nextCursor).toBeNull();
      expect(messages.map(({ role, content, runId }: Record<string, string>) => ({ role, content, runId })), sessionId).toEqual(want);
      expect(messages.some((m: { incomplete?: boolean }) => m.incomplete), sessionId).toBe(false);
    }
  }
}
