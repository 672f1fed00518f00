import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { getDefaultHighWaterMark } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { EventFollower } from '../src/lib/streams/follower.ts';
import { EventHub } from '../src/lib/streams/hub.ts';
import type { RunEvent } from '../src/lib/streams/log.ts';
import { MAX_TOKEN_EVENT_CHARS } from '../src/lib/streams/writer.ts';
import { sleep, useHarness, waitFor, type Child, type Harness } from './helpers/harness.ts';
import { parseMetrics, total, type Sample } from './helpers/prom-text.ts';
import { track } from './helpers/resources.ts';

/**
 * Invariant 12 for readers that never read a large replay: what the API holds for each is
 * bounded by a slice and one event, counted by the API itself (baton_sse_buffered_bytes),
 * whatever the log's length. Before, 200 sockets that never read a finished run's 6 MB log
 * (events of 64 KiB) raised the API's RSS by 84 to 118 MB within 5 s, and each held its
 * page besides the slice the socket had not taken, that slice twice (a string and the copy
 * for the kernel): 167 KB after a full collection, where the docs said 43 KB (now 99 to 125 KB: one event).
 */
let h: Harness;

const READERS = 200;
/** 96 emits of 64 Ki characters: a 6 MB log of token events as large as the writer makes them. */
const PIECE = 'z'.repeat(MAX_TOKEN_EVENT_CHARS);
const PIECES = 96;
const huge = defineAgent({
  name: 'huge-answer',
  async run(ctx) {
    for (let i = 0; i < PIECES; i++) {
      ctx.emit(PIECE);
      await sleep(2);
    }
    return { answer: 'done' };
  },
});

beforeAll(async () => {
  h = await useHarness();
  await h.startWorker({ agents: [huge] });
});

const PROBE = fileURLToPath(new URL('./fixtures/memory-probe.mjs', import.meta.url));

/** The API child's memory after a full collection (see fixtures/memory-probe.mjs), in bytes. */
async function probe(api: Child): Promise<{ rss: number; heapUsed: number; external: number }> {
  const seen = (api.output().match(/MEMORY-PROBE /g) ?? []).length;
  api.process.kill('SIGUSR2');
  const line = await waitFor(() => [...api.output().matchAll(/MEMORY-PROBE (\{.*\})/g)][seen]?.[1], 10_000, 'the memory probe');
  return JSON.parse(line) as { rss: number; heapUsed: number; external: number };
}

/** The API child's resident memory, in bytes (Linux). */
function rssOf(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

/** Memory the kernel gives TCP sockets on this machine, in bytes (not in any process's RSS). */
function kernelTcpBytes(): number {
  return Number(/^TCP:.* mem (\d+)/m.exec(readFileSync('/proc/net/sockstat', 'utf8'))?.[1] ?? NaN) * 4096;
}

/** /metrics of the API, on a connection of its own that is closed after the answer. */
function scrape(port: number): Promise<Sample[]> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let text = '';
    s.setEncoding('utf8');
    s.on('data', (c) => { text += c; });
    s.on('end', () => resolve(parseMetrics(text.slice(text.indexOf('\r\n\r\n') + 4))));
    s.on('error', reject);
    s.write('GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
  });
}

const kb = (n: number) => `${(n / 1024).toFixed(0)} KB`;
const mb = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MB`;

describe('readers that never read a large replay', () => {
  it(`${READERS} sockets on a finished 6 MB log: each holds at most a slice and one event, counted`, async () => {
    // Caps out of the way, and no reader cut while it is measured: this is about what each holds.
    const api = await h.spawn('api', {
      env: { SSE_STALL_MS: '120000', SSE_MAX_PER_KEY: '1000', SSE_MAX_PER_SCOPE: '1000', NODE_OPTIONS: `--import ${PROBE}` },
    });
    const pid = api.process.pid!;
    const port = Number(new URL(api.url!).port);
    const acme = await h.client(api.url!, 'acme', 'client');
    const sub = await acme.submit('big', 'write a lot', { agent: 'huge-answer' });
    await acme.waitStatus(sub.body.id, ['succeeded'], 60_000);
    const full = await acme.sse(`/runs/${sub.body.id}/events`);
    const sizes = full.events.map((e) => e.id!.length + e.event.length + JSON.stringify(e.data).length);
    const logBytes = sizes.reduce((n, s) => n + s, 0);
    const largest = Math.max(...sizes);
    expect(logBytes).toBeGreaterThan(6_000_000);
    expect(largest).toBeGreaterThan(MAX_TOKEN_EVENT_CHARS);

    await sleep(6_000); // the keep-alive connections of the calls above close
    const before = await probe(api);
    const readBefore = total(await scrape(port), 'baton_sse_log_read_bytes_total');
    const rssBefore = rssOf(pid);
    const kernelBefore = kernelTcpBytes();
    const sockets: Socket[] = [];
    let peak = rssBefore;
    const sample = setInterval(() => { peak = Math.max(peak, rssOf(pid)); }, 100);
    try {
      for (let i = 0; i < READERS; i++) {
        const s = connect(port, '127.0.0.1');
        s.on('error', () => {});
        // Sends its request, then never reads a byte: the kernel's buffers fill and stay full.
        s.pause();
        s.write(`GET /v1/scopes/acme/runs/${sub.body.id}/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${acme.key}\r\naccept: text/event-stream\r\n\r\n`);
        sockets.push(s);
      }
      await sleep(5_000);
      const rssAt5s = rssOf(pid);
      // Stalled: every stream is open and none reads more of its log from one scrape to the next.
      let last = -1;
      let m: Sample[] = [];
      await waitFor(async () => {
        m = await scrape(port);
        const read = total(m, 'baton_sse_log_read_bytes_total');
        const settled = total(m, 'baton_sse_clients') === READERS && read === last;
        last = read;
        if (!settled) await sleep(500);
        return settled;
      }, 180_000, `all ${READERS} readers to stall`);
      const held = total(m, 'baton_sse_buffered_bytes');
      const most = total(m, 'baton_sse_buffered_bytes_max');
      const read = total(m, 'baton_sse_log_read_bytes_total') - readBefore;
      const stalled = await probe(api);
      const kernel = kernelTcpBytes() - kernelBefore;
      const gc = stalled.heapUsed + stalled.external - before.heapUsed - before.external;
      console.log(`[stream-stalled-memory] log ${mb(logBytes)} in ${sizes.length} events (largest ${kb(largest)}); ${READERS} stalled readers: ` +
        `held ${mb(held)} (${kb(held / READERS)} each, most ${kb(most)}), read from Redis ${mb(read)} (${kb(read / READERS)} each, the rest in the kernel's ` +
        `socket buffers: +${mb(kernel)} of TCP memory, ${kb(kernel / READERS)} a connection, both ends); API after a full GC: ` +
        `heap +${mb(stalled.heapUsed - before.heapUsed)}, external +${mb(stalled.external - before.external)} (${kb(gc / READERS)} each); ` +
        `RSS +${mb(rssAt5s - rssBefore)} 5 s after they connected, peak +${mb(peak - rssBefore)}`);

      // What one stalled reader may hold: less than the response's high-water mark was pending
      // when its last slice went out (else it would have waited before it), and the slice: less
      // than SLICE_BYTES (16 KiB) and the event that reached it, with SSE framing and HTTP chunk
      // heads of a few dozen bytes an event and piece.
      const framing = 64 * Math.ceil(largest / 1024);
      const bound = getDefaultHighWaterMark(false) + 16 * 1024 + largest + framing;
      expect(most).toBeGreaterThan(0);
      expect(most).toBeLessThanOrEqual(bound);
      expect(held).toBeLessThanOrEqual(READERS * bound);
      // The rest of the log stays in Redis: what a reader made the API read is what it holds
      // and what the kernel's buffers of its connection took (the API's send buffer, which
      // Linux grows up to tcp_wmem's most, and the reader's receive buffer, which stays at
      // tcp_rmem's default while the reader reads nothing), and pages let go when it stalled.
      const wmem = Number(readFileSync('/proc/sys/net/ipv4/tcp_wmem', 'utf8').trim().split(/\s+/)[2]);
      const rmem = Number(readFileSync('/proc/sys/net/ipv4/tcp_rmem', 'utf8').trim().split(/\s+/)[1]);
      expect(read / READERS).toBeLessThanOrEqual(wmem + rmem + 2 * bound);
    } finally {
      clearInterval(sample);
      for (const s of sockets) s.destroy();
    }
    // Their connections gone, nothing is held for them any more.
    await waitFor(async () => total(await scrape(port), 'baton_sse_clients') === 0, 30_000, 'every stream to close');
    const after = await scrape(port);
    expect(total(after, 'baton_sse_buffered_bytes')).toBe(0);
  }, 360_000);
});

describe('a follower whose reader does not take a slice', () => {
  it('lets the rest of its page go while it waits, then reads it again: every event once, in order', async () => {
    const redis = createRedis({ url: h.redisUrl, name: 'test-stalled-follower' });
    const sub = createRedis({ url: h.redisUrl, name: 'test-stalled-follower-sub', blocking: true });
    track(redis, () => redis.quit());
    track(sub, () => sub.quit());
    // 40 events of 6,000 characters and an end: the first page (4 events) is 24 KB, its first
    // slice the 3 events that pass 16 KiB.
    const key = h.keys.scope('acme').events('stalled-page');
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push((await redis.xadd(key, '*', 'type', 'token', 'data', JSON.stringify({ text: String(i % 10).repeat(6000) })))!);
    ids.push((await redis.xadd(key, '*', 'type', 'end', 'data', '{}'))!);
    const logBytes = (await redis.xrange(key, '-', '+')).reduce((n, [id, f]) => n + id.length + f[1].length + f[3].length, 0);

    const got: RunEvent[] = [];
    let release!: () => void;
    const taken = new Promise<void>((r) => { release = r; });
    let asked = 0;
    let read = 0;
    let ended = false;
    const follower = new EventFollower({
      redis, keys: h.keys, hub: new EventHub(sub, createLogger('silent')), scope: 'acme', runId: 'stalled-page', afterId: '0',
      deliver: (events) => got.push(...events),
      // The first slice is not taken until the test says so; the reader takes every other at once.
      writable: () => (++asked === 1 ? taken : undefined),
      onRead: (bytes) => { read += bytes; },
      onEnd: () => { ended = true; },
      onError: (err) => { throw err; },
    });
    const replay = follower.start();
    await waitFor(() => asked === 1, 10_000, 'the first slice to be delivered');
    // Waiting: one slice delivered, nothing of the page kept.
    expect(got.map((e) => e.id)).toEqual(ids.slice(0, 3));
    expect(follower.heldBytes).toBe(0);
    release();
    await replay;
    expect(ended).toBe(true);
    expect(got.map((e) => e.id)).toEqual(ids);
    // The page's rest was read twice, nothing else: the log and one event of 6 KB more.
    expect(read).toBeGreaterThan(logBytes);
    expect(read).toBeLessThan(logBytes + 7_000);
    await follower.stop();
  });
});
