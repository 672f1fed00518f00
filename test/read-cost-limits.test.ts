import { beforeAll, describe, expect, it } from 'vitest';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';
import { watchCommands } from './helpers/monitor.ts';

/**
 * Costly reads are rate-limited per scope by their bytes (src/lib/tenancy/read-budget.ts). The
 * row this answers: four concurrent readers of `…/messages?limit=200` on a 21 MB session got
 * pages within PAGE_MAX_BYTES as required, 312 MB in 18 s, and another scope's whoami went
 * from 5 ms to 160 ms at the median, its runs from 0.1 s to 2 s and more.
 *
 * Scaled down: the same session (30 messages of 700 KB), the same four readers, for WINDOW_MS,
 * against a budget of RATE bytes a second with bursts of BURST. Without the budget they read
 * far past it; with it, what they are served past the free allowance stays within
 * BURST + RATE × the window + the reads in flight when the bucket ran dry, the rest is 429
 * READ_RATE_LIMITED with Retry-After, and scope B, reading pages of its own and asking whoami
 * all along, is never refused. B's whoami and run latencies are printed beside each (never
 * asserted: counted work only).
 */
const MSG = 700 * 1024;
const MESSAGES = 30;
const RATE = 256 * 1024;
const BURST = 2 * 1024 * 1024;
/** The default READ_FREE_BYTES and PAGE_MAX_BYTES (src/lib/config/index.ts). */
const FREE = 256 * 1024;
const PAGE_MAX_BYTES = 4 * 1024 * 1024;
const READERS = 4;
const WINDOW_MS = 6_000;
const REQUESTS = 3;
/**
 * What may pass the bucket beyond BURST + RATE × window: the reads under way when it ran dry,
 * each at most a page, two a reader: an answer is sent, then charged, so a reader's next read
 * may be checked before the charge of the one before it landed. Across the two API processes
 * too: each refuses from its own last charge's answer, which counts every charge made before
 * it, so what a process lets through unaware of the other's charges is the other's reads under
 * way (read-budget.ts). Measured: 3 pages (11 MiB) on a quiet machine, 7 pages (25.3 MiB) with
 * four other test files running.
 */
const IN_FLIGHT = READERS * 2 * PAGE_MAX_BYTES;

let h: Harness;
let limited: string[];
let unlimited: string;
let a: ScopeClient;
let b: ScopeClient;

const message = (i: number, size: number) => JSON.stringify({
  role: i % 2 ? 'assistant' : 'user', content: `turn ${i} `.padEnd(size, 'x'), runId: `r${Math.floor(i / 2)}`, createdAt: i,
});

beforeAll(async () => {
  h = await useHarness({ READ_BYTES_PER_SEC: String(RATE), READ_BURST_BYTES: String(BURST), SUBMIT_BURST: '1000' });
  // Two API processes share the bucket (it is in Redis); a third has no read budget: the row as it was.
  limited = [(await h.startApi()).url, (await h.startApi()).url];
  unlimited = (await h.startApi({ READ_BYTES_PER_SEC: '0' })).url;
  await h.startWorker();
  a = await h.client(limited[0], 'a', 'client');
  b = await h.client(limited[0], 'b', 'client');
  // A's 21 MB session, as the finish writes history; B's chat of 40 messages of 8 KB (330 KB a
  // page: a costly read, charged about 70 KB, twice a second, within B's own budget).
  for (let i = 0; i < MESSAGES; i++) await h.redis.rpush(h.keys.scope('a').messages('big'), message(i, MSG));
  for (let i = 0; i < 40; i++) await h.redis.rpush(h.keys.scope('b').messages('chat'), message(i, 8 * 1024));
}, 120_000);

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length ? Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))]) : NaN;
};

/** B all along: whoami in a loop, a page of its chat every 500 ms, an echo run now and then; every answer kept. */
function scopeB(url: string) {
  let stopped = false;
  const whoami: number[] = [];
  const runs: number[] = [];
  const statuses: number[] = [];
  let pages = 0;
  const loops = [
    (async () => {
      while (!stopped) {
        const t = performance.now();
        const res = await fetch(`${url}/v1/whoami`, { headers: b.headers });
        await res.arrayBuffer();
        statuses.push(res.status);
        whoami.push(performance.now() - t);
        await sleep(20);
      }
    })(),
    (async () => {
      while (!stopped) {
        const res = await fetch(`${url}/v1/scopes/b/sessions/chat/messages?limit=100`, { headers: b.headers });
        await res.arrayBuffer();
        statuses.push(res.status);
        pages++;
        await sleep(500);
      }
    })(),
    (async () => {
      for (let i = 0; !stopped; i++) {
        const t = performance.now();
        const res = await b.submit(`b-run-${Math.random().toString(36).slice(2)}`, `hello ${i}`);
        statuses.push(res.status);
        if (res.status === 202) {
          await b.waitStatus(res.body.id, ['succeeded']);
          runs.push(performance.now() - t);
        }
        await sleep(200);
      }
    })(),
  ];
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return { whoami, runs, statuses, pages };
    },
  };
}

/** Redis's clock, epoch ms: the one the read bucket refills by. */
async function redisMs(): Promise<number> {
  const [sec, micro] = await h.redis.time();
  return Number(sec) * 1000 + Math.floor(Number(micro) / 1000);
}

/**
 * READERS readers of A's big session, paging it over and over for WINDOW_MS, and for at least
 * REQUESTS requests each (a loaded machine may take the whole window for one page), spread
 * over `urls`; refusals retried after 50 ms. The budget they are held to is the bucket's: its
 * burst and what it refilled between Redis's clock before the first request and after the
 * last answer (a slower machine refills it more, as the bucket does).
 */
async function readers(urls: string[]) {
  const served: number[] = [];
  const refused: { status: number; code: string; retryAfter: number }[] = [];
  const from = await redisMs();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: READERS }, async (_, i) => {
    let cursor: string | null = null;
    for (let made = 0; made < REQUESTS || performance.now() - t0 < WINDOW_MS; made++) {
      const res: Response = await fetch(`${urls[i % urls.length]}/v1/scopes/a/sessions/big/messages?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { headers: a.headers });
      const text: string = await res.text();
      if (res.status === 200) {
        served.push(Buffer.byteLength(text));
        cursor = (JSON.parse(text) as { nextCursor: string | null }).nextCursor;
      } else {
        refused.push({ status: res.status, code: (JSON.parse(text) as { error: { code: string } }).error.code, retryAfter: Number(res.headers.get('retry-after')) });
        await sleep(50);
      }
    }
  }));
  // Every answer counted came back within this: the window the budget is held to.
  const windowMs = await redisMs() - from;
  const charged = served.reduce((n, bytes) => n + Math.max(0, bytes - FREE), 0);
  return { served, refused, windowMs, charged, budget: BURST + RATE * windowMs / 1000 };
}

const MiB = (n: number) => (n / 2 ** 20).toFixed(1);

describe('costly reads per scope', () => {
  it('four readers of a 21 MB session: past the budget without it; within it with it, 429 READ_RATE_LIMITED beyond, scope B never refused', async () => {
    // B's baseline, no attack.
    const quiet = scopeB(limited[1]);
    await sleep(2_000);
    const base = await quiet.stop();

    // The row as it was: no read budget.
    const loose = scopeB(unlimited);
    const before = await readers([unlimited]);
    const duringLoose = await loose.stop();

    await h.redis.del(h.keys.scope('a').readBucket);
    const watched = scopeB(limited[1]);
    const after = await readers(limited);
    const during = await watched.stop();

    const line = (what: string, r: Awaited<ReturnType<typeof readers>>, bRun: Awaited<ReturnType<typeof quiet.stop>>) =>
      `[read-cost] ${what}: ${r.served.length} pages, ${MiB(r.served.reduce((n, x) => n + x, 0))} MiB served in ${(r.windowMs / 1000).toFixed(1)} s ` +
      `(${MiB(r.charged)} MiB past the free allowance, budget ${MiB(r.budget)} MiB), ${r.refused.length} refused; ` +
      `B whoami p50/p95 ${percentile(bRun.whoami, 0.5)}/${percentile(bRun.whoami, 0.95)} ms ` +
      `(${(percentile(bRun.whoami, 0.5) / percentile(base.whoami, 0.5)).toFixed(1)}× / ${(percentile(bRun.whoami, 0.95) / percentile(base.whoami, 0.95)).toFixed(1)}× its baseline), ` +
      `B run p50 ${percentile(bRun.runs, 0.5)} ms (${(percentile(bRun.runs, 0.5) / percentile(base.runs, 0.5)).toFixed(1)}×), B pages ${bRun.pages}`;
    console.log(`[read-cost] B baseline: whoami p50/p95 ${percentile(base.whoami, 0.5)}/${percentile(base.whoami, 0.95)} ms, run p50 ${percentile(base.runs, 0.5)} ms`);
    console.log(line('no read budget', before, duringLoose));
    console.log(line(`read budget ${MiB(RATE)} MiB/s, burst ${MiB(BURST)} MiB, 2 API processes`, after, during));

    // Every page is a page (within PAGE_MAX_BYTES), with the budget or without.
    for (const size of [...before.served, ...after.served]) expect(size).toBeLessThanOrEqual(PAGE_MAX_BYTES);
    // The row reproduced: without a budget, the readers take more than it allows in the same time.
    expect(before.refused).toEqual([]);
    expect(before.charged).toBeGreaterThan(before.budget);
    // With it: what they are served past the free allowance stays within it, and the rest is refused.
    expect(after.charged).toBeLessThanOrEqual(after.budget + IN_FLIGHT);
    expect(after.refused.length).toBeGreaterThan(0);
    for (const r of after.refused) {
      expect(r).toMatchObject({ status: 429, code: 'READ_RATE_LIMITED' });
      expect(r.retryAfter).toBeGreaterThanOrEqual(1);
    }
    // B was never refused: not its reads, not its whoami, not its submits.
    for (const run of [duringLoose, during]) {
      expect(run.statuses.filter((s) => s !== 200 && s !== 202)).toEqual([]);
      expect(run.pages).toBeGreaterThan(0);
    }
  }, 120_000);

  it('a refused read changes nothing; an operator sets a scope’s read budget, the limits show its bucket, every API process finds the debt, and a raise ends it', async () => {
    const op = await h.operatorKey();
    const c = await h.client(limited[0], 'c', 'client');
    const other = await h.client(limited[1], 'c', 'client');
    const sk = h.keys.scope('c');
    for (let i = 0; i < 10; i++) await h.redis.rpush(sk.messages('big'), message(i, MSG));
    const put = await fetch(`${limited[0]}/v1/scopes/c/limits`, {
      method: 'PUT', headers: { authorization: `Bearer ${op}`, 'content-type': 'application/json' },
      body: JSON.stringify({ readBytesPerSec: 1024, readBurstBytes: 1024 * 1024 }),
    });
    expect(put.status).toBe(200);
    expect((await put.json() as any).limits).toMatchObject({ readBytesPerSec: 1024, readBurstBytes: 1024 * 1024 });

    // The first page is served (the bucket is full) and charged: about 3.3 MB past the free allowance, 2.3 MB of debt at 1 KiB/s.
    const first = await fetch(`${limited[0]}/v1/scopes/c/sessions/big/messages?limit=200`, { headers: c.headers });
    const firstBytes = Buffer.byteLength(await first.text());
    expect(first.status).toBe(200);
    const debt = firstBytes - FREE - 1024 * 1024;
    const view = await (await fetch(`${limited[0]}/v1/scopes/c/limits`, { headers: { authorization: `Bearer ${op}` } })).json() as any;
    expect(view.inUse.readBytesLeft).toBeLessThan(-debt + 1024 * 5);
    expect(view.inUse.readBytesLeft).toBeGreaterThanOrEqual(-debt);

    // Refused before anything is read: the same answer, and no key of the scope changed.
    const state = async () => {
      const keys = (await h.allKeys()).filter((k) => k.includes(':{c}:')).sort();
      return Promise.all(keys.map(async (k) => [k, String(await h.redis.dumpBuffer(k))]));
    };
    const was = await state();
    for (let i = 0; i < 3; i++) {
      const refused = await c.get('/sessions/big/messages?limit=1');
      expect([refused.status, refused.body.error.code]).toEqual([429, 'READ_RATE_LIMITED']);
      expect(refused.body.error.details).toEqual([{ path: 'scope', message: expect.stringContaining('read budget') }]);
      // About debt / 1 KiB a second.
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(debt / 1024 - 60);
      expect((await c.get('/runs')).status).toBe(429);
    }
    expect(await state()).toEqual(was);

    // The other API process had not charged the scope: its next costly read is served, and the
    // charge that follows the answer finds the debt; it refuses from then on (a read that came
    // while that charge was still on its way is served too).
    const found = await other.get('/sessions/big/messages?limit=1');
    expect(found.status).toBe(200);
    await waitFor(async () => (await other.get('/sessions/big/messages?limit=1')).status === 429, 20_000, 'the other process to refuse');
    expect((await other.get('/sessions/big/messages?limit=1')).status).toBe(429);
    // A read that is not costly is not refused.
    expect((await fetch(`${limited[1]}/v1/whoami`, { headers: other.headers })).status).toBe(200);

    // An operator raises the scope's budget: the processes refusing it look at its bucket again
    // within LIMITS_CACHE_MS (its old rate would have held them for about 40 minutes).
    await fetch(`${limited[0]}/v1/scopes/c/limits`, {
      method: 'PUT', headers: { authorization: `Bearer ${op}`, 'content-type': 'application/json' },
      body: JSON.stringify({ readBytesPerSec: 64 * 1024 * 1024 }),
    });
    for (const who of [c, other]) {
      await waitFor(async () => (await who.get('/sessions/big/messages?limit=1')).status === 200 || undefined, 10_000, 'the raised budget');
    }
    // Another scope's reads never saw any of it.
    expect((await b.get('/sessions/chat/messages?limit=100')).status).toBe(200);
  });

  it('ordinary reads (a chat page within READ_FREE_BYTES) are never charged, whatever the budget', async () => {
    const op = await h.operatorKey();
    const d = await h.client(limited[0], 'd', 'client');
    const sk = h.keys.scope('d');
    // 50 turns of a chat: 100 messages of 1.5 KB, a page of about 160 KB.
    for (let i = 0; i < 100; i++) await h.redis.rpush(sk.messages('chat'), message(i, 1500));
    await fetch(`${limited[0]}/v1/scopes/d/limits`, {
      method: 'PUT', headers: { authorization: `Bearer ${op}`, 'content-type': 'application/json' },
      body: JSON.stringify({ readBytesPerSec: 1, readBurstBytes: 1 }),
    });
    for (let i = 0; i < 30; i++) {
      const res = await d.get(`/sessions/chat/messages?limit=${i % 2 ? 100 : 50}`);
      expect(res.status).toBe(200);
      expect(res.body.messages.length).toBe(i % 2 ? 100 : 50);
      expect((await d.get('/runs?limit=50')).status).toBe(200);
    }
    expect(await h.redis.exists(sk.readBucket)).toBe(0);
  });

  it('a history page of huge messages reads at most one message more than it answers (MONITOR: LRANGE entries per call)', async () => {
    const monitor = await watchCommands(h.redisUrl);
    track(monitor, async () => monitor.stop());
    const key = h.keys.scope('a').messages('big');
    const pages: { answered: number; read: number }[] = [];
    // Whole pages (five messages of 700 KB within 4 MiB), and pages of one (limit=1).
    for (const query of ['limit=200', 'limit=200&cursor=5', 'limit=1&cursor=7']) {
      const seen = monitor.seen.length;
      const res = await fetch(`${unlimited}/v1/scopes/a/sessions/big/messages?${query}`, { headers: a.headers });
      const body = await res.json() as { messages: unknown[] };
      await sleep(200);
      const ranges = monitor.seen.slice(seen).filter((args) => args[0].toLowerCase() === 'lrange' && args[1] === key);
      const read = ranges.reduce((n, args) => n + Math.min(MESSAGES - 1, Number(args[3])) - Number(args[2]) + 1, 0);
      pages.push({ answered: body.messages.length, read });
    }
    monitor.stop();
    console.log(`[read-cost] history pages of 700 KB messages, entries answered/read per call: ${JSON.stringify(pages)}`);
    expect(pages.map((p) => p.answered)).toEqual([5, 5, 1]);
    for (const p of pages) expect(p.read).toBeLessThanOrEqual(p.answered + 1);
  });
});
