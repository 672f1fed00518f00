import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import type { HistoryMessage } from '../src/lib/sessions/memory-session.ts';
import { sleep, useHarness, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Listings and the claim are bounded in bytes, not only in counts (issue 29's HIGH finding,
 * scaled down): a session of 40 turns of 256 KiB, 40 runs of 256 KiB inputs, a run with 40
 * steps and 40 events of 256 KiB each. Before, `GET …/messages?limit=500` answered the whole
 * 20 MiB history in one body, `GET /runs?sessionId=…` the 10 MiB of inputs, the steps route
 * every step, and aborted requests of that kind stalled every other tenant's requests.
 *
 * Against a real `baton api` process: every JSON page stays within PAGE_MAX_BYTES, walking
 * the pages gives every item once and in order, another scope's `GET /v1/whoami` and the
 * API's `/healthz` are answered throughout (every probe a 200, one after another while the pages
 * are served; their slowest answer is printed, not bounded: a loaded machine is slower, and
 * the unbounded listings held one 9 s on a quiet machine), and the API process lives through it
 * all with its V8 heap capped at HEAP_CAP_MIB. Then the claim reads at most
 * HISTORY_READ_MAX_BYTES of history, and a submit that would take a session's history past
 * HISTORY_MAX_BYTES is refused.
 */
const ITEM = 256 * 1024;
const TURNS = 40;
/** The default PAGE_MAX_BYTES (src/lib/config/index.ts). */
const PAGE_MAX_BYTES = 4 * 1024 * 1024;
/**
 * The API's heap cap during the attack (`--max-old-space-size`): a count, not a measure. The
 * process either lives or dies of running out of heap, however lazily V8 collects garbage on a
 * busy machine (its RSS, which an earlier version bounded, gained 90 to 185 MiB alone and up to
 * 254 MiB in clean-clone CI, mostly garbage not yet collected). With pages bounded, the API
 * lives through the attack under a cap of 128 MiB; with PAGE_MAX_BYTES raised out of the way
 * (512 MiB, so every listing comes whole, as before), it dies under 128 and 256 MiB and lives
 * under 384. 192 sits between the two with room on each side.
 */
const HEAP_CAP_MIB = 192;

let h: Harness;
let api: Child;
let acme: ScopeClient;
let quiet: ScopeClient;
let runIds: string[] = [];

const big = (i: number, what: string) => `${what} ${i} `.padEnd(ITEM, 'x');

beforeAll(async () => {
  // No read budget: this file is about what one page may hold; what a scope may read in a
  // while is test/read-cost-limits.test.ts's (its listings here read about 90 MiB at once).
  h = await useHarness({ SUBMIT_BURST: '1000', READ_BYTES_PER_SEC: '0' });
  api = await h.spawn('api', { env: { NODE_OPTIONS: `--max-old-space-size=${HEAP_CAP_MIB}` } });
  acme = await h.client(api.url!, 'acme', 'client');
  quiet = await h.client(api.url!, 'quiet', 'client');
  const sk = h.keys.scope('acme');
  // The session's history, as the finish writes it: 40 turns of 256 KiB each way.
  for (let i = 0; i < TURNS; i++) {
    await h.redis.rpush(sk.messages('big'),
      JSON.stringify({ role: 'user', content: big(i, 'question'), runId: `r${i}`, createdAt: i }),
      JSON.stringify({ role: 'assistant', content: big(i, 'answer'), runId: `r${i}`, createdAt: i }));
  }
  // 40 runs of the session with 256 KiB inputs (no worker: they queue behind the first).
  runIds = [];
  for (let i = 0; i < TURNS; i++) {
    const res = await acme.submit('big', big(i, 'input').slice(0, 250_000));
    expect(res.status).toBe(202);
    runIds.push(res.body.id);
  }
  // The first run's 40 steps and 40 events of 256 KiB, as a worker would have stored them.
  const run = runIds[0];
  for (let i = 0; i < TURNS; i++) {
    await h.redis.hset(sk.steps(run), `step:s:${i}`, JSON.stringify({ v: big(i, 'step'), startedAt: 1_000 + i, finishedAt: 1_000 + i, o: i }));
    await h.redis.xadd(sk.events(run), '*', 'type', 'tool-result', 'data', JSON.stringify({ output: big(i, 'tool') }));
  }
}, 120_000);

/** The API process's resident memory, from /proc (0 once it is gone). */
function rss(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Times GET `path` of `url` with `headers` again and again until stopped: the slowest, and any failure. */
function probe(url: string, headers: Record<string, string> = {}) {
  let stopped = false;
  let slowest = 0;
  let probes = 0;
  const failures: string[] = [];
  const loop = (async () => {
    while (!stopped) {
      const t = performance.now();
      try {
        const res = await fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
        await res.arrayBuffer();
        if (res.status !== 200) failures.push(`${res.status}`);
      } catch (err) {
        failures.push((err as Error).name);
      }
      slowest = Math.max(slowest, performance.now() - t);
      probes++;
      await sleep(25);
    }
  })();
  return { stop: async () => { stopped = true; await loop; return { slowest: Math.round(slowest), probes, failures }; } };
}

/** GET with the key, aborted by the client after `ms` (a reader that went away). */
async function abandoned(path: string, ms: number): Promise<void> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), ms);
  try {
    const res = await fetch(`${api.url}/v1/scopes/acme${path}`, { headers: acme.headers, signal: ac.signal });
    // Read slowly: a page at a time, as a client that stops reading would.
    const reader = res.body!.getReader();
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
      await sleep(50);
    }
  } catch { /* aborted */ } finally {
    clearTimeout(timer);
  }
}

/** Every page of a listing: each body's size, and the items in order. */
async function walk(path: string, items: (body: any) => any[]): Promise<{ all: any[]; sizes: number[]; counts: number[] }> {
  const all: any[] = [];
  const sizes: number[] = [];
  const counts: number[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 200; page++) {
    const sep = path.includes('?') ? '&' : '?';
    const res = await fetch(`${api.url}/v1/scopes/acme${path}${cursor ? `${sep}cursor=${encodeURIComponent(cursor)}` : ''}`, { headers: acme.headers });
    const text = await res.text();
    expect(res.status, text.slice(0, 200)).toBe(200);
    const body = JSON.parse(text);
    sizes.push(Buffer.byteLength(text));
    counts.push(items(body).length);
    all.push(...items(body));
    cursor = body.nextCursor;
    if (!cursor) return { all, sizes, counts };
  }
  throw new Error(`${path}: the listing does not end`);
}

describe('listings are bounded in bytes', () => {
  it('while aborted listings of huge sessions come and go, another scope and /healthz answer, no page passes PAGE_MAX_BYTES, the API lives within its heap cap', async () => {
    const pid = api.process.pid!;
    const before = rss(pid);
    let peak = before;
    const sampler = setInterval(() => { peak = Math.max(peak, rss(pid)); }, 20);
    const whoami = probe(`${api.url}/v1/whoami`, quiet.headers);
    const health = probe(`${api.url}/healthz`);
    const attack = async () => {
      const paths = ['/sessions/big/messages?limit=500', '/runs?sessionId=big&limit=200', `/runs/${runIds[0]}/steps`, `/runs/${runIds[0]}/events`];
      for (let round = 0; round < 3; round++) {
        await Promise.all(Array.from({ length: 10 }, (_, i) => abandoned(paths[i % paths.length], 1_000)));
      }
    };
    const [, messages, runs, steps] = await Promise.all([
      attack(),
      walk('/sessions/big/messages?limit=500', (b) => b.messages),
      walk('/runs?sessionId=big&limit=200', (b) => b.runs),
      walk(`/runs/${runIds[0]}/steps`, (b) => b.steps),
    ]);
    const [who, hz] = [await whoami.stop(), await health.stop()];
    clearInterval(sampler);
    console.log(`[bytes-limits] whoami of another scope: ${JSON.stringify(who)}; /healthz: ${JSON.stringify(hz)}; ` +
      `API RSS ${Math.round(before / 2 ** 20)} -> peak ${Math.round(peak / 2 ** 20)} MiB; ` +
      `pages (bytes): messages ${JSON.stringify(messages.sizes)}, runs ${JSON.stringify(runs.sizes)}, steps ${JSON.stringify(steps.sizes)}`);

    // Every item once, in order, over pages none of which passes the budget.
    expect(messages.all.map((m) => `${m.role} ${m.runId}`)).toEqual(
      Array.from({ length: TURNS }, (_, i) => [`user r${i}`, `assistant r${i}`]).flat());
    expect(runs.all.map((r) => r.id)).toEqual([...runIds].reverse());
    expect(steps.all.map((s) => s.key)).toEqual(Array.from({ length: TURNS }, (_, i) => `step:s:${i}`));
    expect(steps.all.every((s, i) => s.value === big(i, 'step'))).toBe(true);
    for (const { sizes, counts } of [messages, runs, steps]) {
      for (const size of sizes) expect(size).toBeLessThanOrEqual(PAGE_MAX_BYTES);
      // Pages stop on bytes (fewer items than `limit`, a cursor all the same), and are full ones.
      expect(counts.length).toBeGreaterThan(1);
      expect(sizes[0]).toBeGreaterThan(PAGE_MAX_BYTES - 2 * ITEM - 8 * 1024);
    }

    expect(who.failures).toEqual([]);
    expect(hz.failures).toEqual([]);
    expect(who.probes).toBeGreaterThan(5);
    expect(hz.probes).toBeGreaterThan(5);
    // Alive, its heap never past the cap (V8 ends a process that runs out of heap).
    expect([api.process.exitCode, api.process.signalCode]).toEqual([null, null]);
    expect((await fetch(`${api.url}/healthz`)).status).toBe(200);
  }, 120_000);

  it('an item larger than the page budget comes alone on its page, and paging goes on past it', async () => {
    const small = await h.startApi({ PAGE_MAX_BYTES: String(ITEM) });
    const res = await fetch(`${small.url}/v1/scopes/acme/sessions/big/messages?limit=5`, { headers: acme.headers });
    const body = await res.json() as any;
    expect(body.messages).toHaveLength(1);
    expect(body.nextCursor).toBe('1');
    const next = await (await fetch(`${small.url}/v1/scopes/acme/sessions/big/messages?limit=5&cursor=1`, { headers: acme.headers })).json() as any;
    expect([next.messages.length, next.messages[0].role, next.nextCursor]).toEqual([1, 'assistant', '2']);
    const runs = await (await fetch(`${small.url}/v1/scopes/acme/runs?sessionId=big&limit=5`, { headers: acme.headers })).json() as any;
    expect(runs.runs.map((r: any) => r.id)).toEqual([runIds.at(-1)]);
    expect(runs.nextCursor).not.toBeNull();
    const steps = await (await fetch(`${small.url}/v1/scopes/acme/runs/${runIds[0]}/steps?limit=5&cursor=39`, { headers: acme.headers })).json() as any;
    expect([steps.steps.map((s: any) => s.key), steps.nextCursor]).toEqual([['step:s:39'], null]);
    // The event stream replays every event, large ones a few at a time.
    // The event stream replays every event (its queued status, then the 40), large ones a few at a time.
    const { events } = await acme.sse(`/runs/${runIds[0]}/events`, { stopAfter: TURNS + 1, signal: AbortSignal.timeout(20_000) });
    expect(events.filter((e) => e.event === 'tool-result').map((e) => e.data.output)).toEqual(Array.from({ length: TURNS }, (_, i) => big(i, 'tool')));
  }, 60_000);
});

describe('usage rows page by count and bytes', () => {
  it('a day of many rows comes in pages; the rows of all pages are the range, each page totals its own', async () => {
    const sk = h.keys.scope('usagebig');
    const fields: string[] = [];
    for (let i = 0; i < 300; i++) fields.push(`in:agent:model-${String(i).padStart(3, '0')}-${'m'.repeat(150)}`, '10', `calls:agent:model-${String(i).padStart(3, '0')}-${'m'.repeat(150)}`, '1');
    await h.redis.hset(sk.usage('2024-03-02'), ...fields);
    await h.redis.hset(sk.usage('2024-03-01'), 'in:agent:first', '5', 'calls:agent:first', '1');
    const small = await h.startApi({ PAGE_MAX_BYTES: String(16 * 1024) });
    const admin = await h.client(small.url, 'usagebig', 'admin');
    const rows: any[] = [];
    let calls = 0;
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: { status: number; body: any } = await admin.get(`/usage?from=2024-03-01&to=2024-03-03&limit=120${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.status).toBe(200);
      expect(Buffer.byteLength(JSON.stringify(res.body))).toBeLessThanOrEqual(16 * 1024);
      expect(res.body.total.modelCalls).toBe(res.body.rows.reduce((n: number, r: any) => n + r.modelCalls, 0));
      rows.push(...res.body.rows);
      calls += res.body.total.modelCalls;
      cursor = res.body.nextCursor;
      pages++;
    } while (cursor && pages < 100);
    expect(rows.map((r) => `${r.day} ${r.model.slice(0, 9)}`)).toEqual(['2024-03-01 first', ...Array.from({ length: 300 }, (_, i) => `2024-03-02 model-${String(i).padStart(3, '0')}`)]);
    expect(calls).toBe(301);
    // Stopped on bytes (16 KiB holds about 75 of these rows), not on the count of 120.
    expect(pages).toBeGreaterThan(4);
    const bad = await admin.get('/usage?from=2024-03-01&to=2024-03-03&cursor=2024-02-30.1');
    expect([bad.status, bad.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);
  });
});

describe('the claim and the stored history are bounded in bytes', () => {
  it('a claim hands the agent the newest messages that fit HISTORY_READ_MAX_BYTES, and no more', async () => {
    const seen: { history: HistoryMessage[]; at: number }[] = [];
    const probeAgent = defineAgent({ name: 'history-probe', run(ctx) { seen.push({ history: [...ctx.history], at: performance.now() }); return 'ok'; } });
    // A runtime of its own: the big session's runs wait for a worker of the file's runtime.
    const runtime = `${h.runtime}-claim`;
    await h.startWorker({ env: { RUNTIME: runtime, HISTORY_READ_MAX_BYTES: String(2 * 1024 * 1024) }, agents: [probeAgent] });
    // A session of its own with the same huge history (the big one's runs queue without a worker for them).
    const sk = h.keys.scope('acme');
    const history = await h.redis.lrange(sk.messages('big'), 0, -1);
    await h.redis.rpush(sk.messages('claimed'), ...history);
    const t0 = performance.now();
    const res = await acme.submit('claimed', 'a small question', { agent: probeAgent.name, runtime });
    expect(res.status).toBe(202);
    await acme.waitStatus(res.body.id, ['succeeded']);
    const [view] = seen;
    const bytes = view.history.reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)), 0);
    console.log(`[bytes-limits] claim of a ${history.length}-message session (${Math.round(history.length * ITEM / 2 ** 20)} MiB): ` +
      `${view.history.length} messages, ${bytes} bytes, first line after ${Math.round(view.at - t0)} ms`);
    // The newest messages that fit 2 MiB: seven of 256 KiB, the newest last.
    expect(view.history.length).toBe(7);
    expect(bytes).toBeLessThanOrEqual(2 * 1024 * 1024);
    expect(view.history.at(-1)!.content).toBe(big(TURNS - 1, 'answer'));
    // The whole history stays stored.
    expect(await h.redis.llen(sk.messages('claimed'))).toBe(2 * TURNS + 2);
  }, 60_000);

  it('a submit that would take the session history past HISTORY_MAX_BYTES is 409 SESSION_HISTORY_FULL, and writes nothing', async () => {
    const capped = await h.startApi({ HISTORY_MAX_BYTES: String(20 * 1024 * 1024) });
    const full = await fetch(`${capped.url}/v1/scopes/acme/runs`, {
      method: 'POST', headers: { ...acme.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ sessionId: 'big', input: { content: 'one more' }, runtime: h.runtime }),
    });
    const body = await full.json() as any;
    expect([full.status, body.error.code]).toEqual([409, 'SESSION_HISTORY_FULL']);
    expect(body.error.details[0].path).toBe('body.sessionId');
    expect(await h.redis.zcard(h.keys.scope('acme').sessionRuns('big'))).toBe(TURNS);
    // Another session of the scope is not affected.
    const fresh = await fetch(`${capped.url}/v1/scopes/acme/runs`, {
      method: 'POST', headers: { ...acme.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ sessionId: 'fresh', input: { content: 'hello' }, runtime: h.runtime }),
    });
    expect(fresh.status).toBe(202);
  });
});
