import { get as httpGet } from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { watchCommands } from './helpers/monitor.ts';
import { track } from './helpers/resources.ts';

/**
 * The schedules listing pages by count and by bytes, with a cursor (issue 39's HIGH row): a
 * scope at its 100 schedules, each with a 256 Ki-character input and 60 metadata keys of 200
 * characters, answered `GET …/schedules` with one 27 MB body, and `?limit=1` was 400. Those
 * schedules are made here through an API whose template cap is raised to a body's size (what
 * a scope made before the cap existed); another API, with the defaults, lists them.
 *
 * Counted, never timed: each page's bytes, the schedules a walk of the cursor returns, and
 * the HGETALLs one page costs Redis (MONITOR). The template cap refuses a larger template
 * at create with its code and field, and writes nothing.
 */
const SCHEDULES = 100;
/** The default PAGE_MAX_BYTES (src/lib/config/index.ts). */
const PAGE_MAX_BYTES = 4 * 1024 * 1024;
/** The default SCHEDULE_TEMPLATE_MAX_BYTES (src/lib/config/index.ts). */
const TEMPLATE_MAX_BYTES = 64 * 1024;
/** The row's template: submitBody's largest input, and 60 metadata keys of 200 characters (12.6 KB of the 16 KiB allowed). */
const INPUT_CHARS = 256 * 1024;
const metadata = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${String(i).padStart(2, '0')}`, 'm'.repeat(200)]));

let h: Harness;
let url: string;
let acme: ScopeClient;
let quiet: ScopeClient;
let made: string[] = [];

const template = (i: number) => ({ sessionPerTick: true, input: { content: `brief ${i} `.padEnd(INPUT_CHARS, 'x') }, metadata });

beforeAll(async () => {
  // No scheduler and no bulk worker: the schedules (yearly) never fire, and only the listings read them.
  // No read budget: this file is about what one page holds, and walks 27 MB of schedules many times over.
  h = await useHarness({ SCHEDULE_POLL_MS: '0', BULK_POLL_MS: '0', READ_BYTES_PER_SEC: '0' });
  const before = (await h.startApi({ SCHEDULE_TEMPLATE_MAX_BYTES: String(1024 * 1024) })).url;
  url = (await h.startApi()).url;
  const maker = await h.client(before, 'acme', 'admin');
  made = [];
  for (let i = 0; i < SCHEDULES; i++) {
    const res = await maker.post('/schedules', { cron: '0 0 1 1 *', run: { ...template(i), runtime: h.runtime } });
    expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(201);
    made.push(res.body.id);
  }
  acme = await h.client(url, 'acme', 'client');
  quiet = await h.client(url, 'quiet', 'client');
}, 120_000);

/**
 * A GET on a connection of its own. The readers and the API share this process's event loop,
 * which four readers' 4 MB pages can hold for seconds; a kept-alive connection reused across
 * such a stall was once reset under the next request (ECONNRESET, in a clean-clone CI run), and
 * connection reuse is not what this file is about.
 */
function getOnce(target: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    httpGet(target, { headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    }).on('error', reject);
  });
}

/** GET `path` of the default API with `c`'s key: the status, the body's bytes as sent, and the body. */
async function getRaw(c: ScopeClient, path: string): Promise<{ status: number; bytes: number; body: any }> {
  const { status, text } = await getOnce(`${url}/v1/scopes/${c.scope}${path}`, c.headers);
  return { status, bytes: Buffer.byteLength(text), body: JSON.parse(text) };
}

/** Every page of the schedules listing at `limit` (the default when undefined), by its cursor. */
async function walk(limit?: number): Promise<{ ids: string[]; pages: number[]; bytes: number[] }> {
  const ids: string[] = [];
  const pages: number[] = [];
  const bytes: number[] = [];
  let cursor: string | null = null;
  do {
    const q = new URLSearchParams();
    if (limit !== undefined) q.set('limit', String(limit));
    if (cursor) q.set('cursor', cursor);
    const page = await getRaw(acme, `/schedules${q.size ? `?${q}` : ''}`);
    expect(page.status, JSON.stringify(page.body).slice(0, 300)).toBe(200);
    ids.push(...page.body.schedules.map((s: { id: string }) => s.id));
    pages.push(page.body.schedules.length);
    bytes.push(page.bytes);
    cursor = page.body.nextCursor;
    expect(pages.length, 'a walk that does not end').toBeLessThanOrEqual(SCHEDULES + 1);
  } while (cursor);
  return { ids, pages, bytes };
}

describe('GET …/schedules with 100 schedules of 275 KB templates', () => {
  it('pages within PAGE_MAX_BYTES, and walking the cursor gives each schedule once, oldest first', async () => {
    for (const limit of [undefined, 7, 200]) {
      const w = await walk(limit);
      const total = w.bytes.reduce((a, b) => a + b, 0);
      console.log(`[listing-bounds] limit=${limit ?? 'default'}: ${w.pages.length} pages of ${w.pages.join(',')} schedules; ` +
        `largest body ${Math.max(...w.bytes)} bytes of ${PAGE_MAX_BYTES}; ${total} bytes in all (before: one body of them all)`);
      expect(w.ids).toEqual(made);
      for (const b of w.bytes) expect(b).toBeLessThanOrEqual(PAGE_MAX_BYTES);
      // The bytes, not only the count, end a page: 15 of these schedules fill 4 MiB.
      expect(Math.max(...w.pages)).toBeLessThanOrEqual(Math.min(limit ?? 50, 15));
      if (limit === 7) expect(w.pages.slice(0, -1).every((n) => n === 7)).toBe(true);
    }
  });

  it('?limit=1 answers one schedule and a cursor, reading one schedule from Redis', async () => {
    const monitor = await watchCommands(h.redisUrl);
    track(monitor, async () => monitor.stop());
    const first = await getRaw(acme, '/schedules?limit=1');
    await new Promise((r) => setTimeout(r, 200));
    monitor.stop();
    expect(first.status).toBe(200);
    expect(first.body.schedules.map((s: { id: string }) => s.id)).toEqual([made[0]]);
    expect(first.body.nextCursor).toEqual(expect.any(String));
    const onSchedules = monitor.seen.filter((args) => args[1]?.startsWith(`${h.prefix}:`) && /:schedule:/.test(args[1]));
    const count = (cmd: string) => onSchedules.filter((a) => a[0].toLowerCase() === cmd).length;
    console.log(`[listing-bounds] GET ?limit=1: ${first.bytes} bytes; schedule hashes: ${count('hgetall')} HGETALL, ${count('hstrlen')} HSTRLEN`);
    // One schedule read whole, and its two sized fields measured: not the 100 templates.
    expect([count('hgetall'), count('hstrlen'), onSchedules.length]).toEqual([1, 2, 3]);

    const second = await getRaw(acme, `/schedules?limit=1&cursor=${first.body.nextCursor}`);
    expect(second.body.schedules.map((s: { id: string }) => s.id)).toEqual([made[1]]);
    // The client and the listing agree on the page.
    expect((await acme.get('/schedules?limit=1')).body).toEqual(first.body);
  });

  it('a full page reads whole only the schedules it shows', async () => {
    const monitor = await watchCommands(h.redisUrl);
    track(monitor, async () => monitor.stop());
    const page = await getRaw(acme, '/schedules?limit=50');
    await new Promise((r) => setTimeout(r, 200));
    monitor.stop();
    const hgetalls = monitor.seen.filter((a) => a[0].toLowerCase() === 'hgetall' && a[1]?.startsWith(`${h.prefix}:`) && /:schedule:/.test(a[1]));
    console.log(`[listing-bounds] GET ?limit=50: ${page.body.schedules.length} schedules in ${page.bytes} bytes, ${hgetalls.length} HGETALL`);
    expect(page.body.schedules.length).toBeLessThan(50);
    expect(hgetalls.length).toBe(page.body.schedules.length);
  });

  it('a schedule deleted between two pages moves no other: the walk goes on after the cursor', async () => {
    const first = await getRaw(acme, '/schedules?limit=3');
    const admin = await h.client(url, 'acme', 'admin');
    // The cursor's own schedule, and the one after it.
    expect((await admin.del(`/schedules/${made[2]}`)).status).toBe(204);
    expect((await admin.del(`/schedules/${made[3]}`)).status).toBe(204);
    made.splice(2, 2);
    const next = await getRaw(acme, `/schedules?limit=3&cursor=${first.body.nextCursor}`);
    expect(next.body.schedules.map((s: { id: string }) => s.id)).toEqual(made.slice(2, 5));
  });

  it('refuses a bad limit or cursor with VALIDATION_FAILED naming it', async () => {
    for (const [q, path] of [['limit=0', 'query.limit'], ['limit=201', 'query.limit'], ['limit=x', 'query.limit'],
      ['cursor=abc', 'query.cursor'], ['cursor=1_%7Bx%7D', 'query.cursor'], ['page=2', 'query']] as const) {
      const res = await acme.get(`/schedules?${q}`);
      expect(res.status, q).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_FAILED');
      expect(res.body.error.details.map((d: { path: string }) => d.path).join(' '), q).toContain(path);
    }
  });

  it('4 readers walking it at once: each body within the budget; another scope\'s whoami printed beside', async () => {
    const whoami: number[] = [];
    let reading = true;
    const probe = (async () => {
      while (reading) {
        const t0 = performance.now();
        expect((await getOnce(`${url}/v1/whoami`, quiet.headers)).status).toBe(200);
        whoami.push(performance.now() - t0);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const walks = await Promise.all([walk(), walk(), walk(), walk()]);
    reading = false;
    await probe;
    const largest = Math.max(...walks.flatMap((w) => w.bytes));
    const sorted = whoami.sort((a, b) => a - b);
    console.log(`[listing-bounds] 4 concurrent walks: largest body ${largest} bytes; ` +
      `quiet scope's whoami over ${sorted.length} calls: p50 ${sorted[Math.floor(sorted.length / 2)]?.toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms`);
    for (const w of walks) expect(w.ids).toEqual(made);
    expect(largest).toBeLessThanOrEqual(PAGE_MAX_BYTES);
  });
});

describe('a schedule template over SCHEDULE_TEMPLATE_MAX_BYTES', () => {
  it('is refused at create with 413 SCHEDULE_TEMPLATE_TOO_LARGE naming body.run, and writes nothing', async () => {
    const admin = await h.client(url, 'capped', 'admin');
    const before = await h.allKeys();
    const body = (content: string) => ({ cron: '0 0 1 1 *', run: { sessionId: 's', input: { content }, runtime: h.runtime, metadata } });
    // 64 KiB of template as JSON: the input's share of it is what the metadata leaves.
    const overhead = Buffer.byteLength(JSON.stringify(body('').run));
    const over = await admin.post('/schedules', body('x'.repeat(TEMPLATE_MAX_BYTES - overhead + 1)));
    expect(over.status, JSON.stringify(over.body)).toBe(413);
    expect(over.body.error.code).toBe('SCHEDULE_TEMPLATE_TOO_LARGE');
    expect(over.body.error.details).toEqual([{ path: 'body.run', message: expect.stringContaining(`${TEMPLATE_MAX_BYTES + 1} bytes`) }]);
    expect((await h.allKeys()).sort()).toEqual(before.sort());
    expect((await admin.get('/schedules')).body).toEqual({ schedules: [], nextCursor: null });
    // One byte less is the cap itself: made.
    const at = await admin.post('/schedules', body('x'.repeat(TEMPLATE_MAX_BYTES - overhead)));
    expect(at.status, JSON.stringify(at.body).slice(0, 300)).toBe(201);
    expect(Buffer.byteLength(JSON.stringify(at.body.run))).toBe(TEMPLATE_MAX_BYTES);
  });
});

describe('GET …/operations', () => {
  it('pages newest first by a cursor, each operation once, a page of one reading one operation', async () => {
    // Nothing advances them here (no bulk worker), so they all stay running: the cap is raised for them.
    const opsUrl = (await h.startApi({ BULK_OPERATIONS_MAX_PER_SCOPE: '1000' })).url;
    const admin = await h.client(opsUrl, 'ops', 'admin');
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) {
      const res = await admin.post('/runs/cancel', { filter: { agent: `nobody-${i}` } });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      ids.unshift(res.body.id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/operations?limit=7${cursor ? `&cursor=${cursor}` : ''}`;
      const res = await admin.get<{ operations: { id: string }[]; nextCursor: string | null }>(path);
      expect(res.status).toBe(200);
      expect(res.body.operations.length).toBeLessThanOrEqual(7);
      seen.push(...res.body.operations.map((o) => o.id));
      cursor = res.body.nextCursor;
      expect(++pages).toBeLessThanOrEqual(5);
    } while (cursor);
    expect(seen).toEqual(ids);

    const monitor = await watchCommands(h.redisUrl);
    track(monitor, async () => monitor.stop());
    const one = await admin.get('/operations?limit=1');
    await new Promise((r) => setTimeout(r, 200));
    monitor.stop();
    expect(one.body.operations.map((o: { id: string }) => o.id)).toEqual([ids[0]]);
    const read = monitor.seen.filter((a) => a[0].toLowerCase() === 'hgetall' && a[1]?.startsWith(`${h.prefix}:`) && /:operation:/.test(a[1]));
    expect(read).toHaveLength(1);

    // An operation past its retention (its hash gone) is left out and its entry dropped; the
    // page holds one fewer, and its cursor goes on from there.
    await h.redis.del(h.keys.scope('ops').operation(ids[0]));
    const after = (await admin.get('/operations?limit=2')).body;
    expect(after.operations.map((o: { id: string }) => o.id)).toEqual([ids[1]]);
    expect((await admin.get(`/operations?limit=2&cursor=${after.nextCursor}`)).body.operations.map((o: { id: string }) => o.id)).toEqual([ids[2], ids[3]]);
    expect(await h.redis.zscore(h.keys.scope('ops').operations, ids[0])).toBeNull();
  });
});
