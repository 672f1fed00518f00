import { beforeAll, describe, expect, it } from 'vitest';
import { EventFollower } from '../src/lib/streams/follower.ts';
import { EventHub } from '../src/lib/streams/hub.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis } from '../src/lib/redis/redis.ts';
import { track } from './helpers/resources.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { SseParser, type SseMessage } from '../src/lib/client/sse-parser.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { expectExactly, fullLog, type Seen } from './helpers/stream-check.ts';

const CHUNK = 'x'.repeat(4096);
const CHUNKS = 8000;

/**
 * 32 MiB of answer in 4 KiB tokens: far more than loopback socket buffers (which grow to
 * several MiB) and the client library hold for a reader that stalls.
 */
/**
 * The firehose streams its first chunk, then waits until the test's reader has it: the test
 * is about a reader that stalls mid-stream, not one that joins after megabytes are queued.
 */
let readerHasFirstChunk!: () => void;
const firstChunkRead = new Promise<void>((resolve) => { readerHasFirstChunk = resolve; });

const firehose = defineAgent({
  name: 'firehose',
  async run(ctx) {
    for (let i = 0; i < CHUNKS; i++) {
      ctx.emit(CHUNK);
      if (i === 0) await firstChunkRead;
      if (i % 20 === 19) await new Promise((r) => setTimeout(r, 1));
    }
    return { answer: `${CHUNKS} chunks` };
  },
});

/** A reader that takes no byte for this long while bytes wait for it is dropped. */
const STALL_MS = 1000;

let h: Harness;
let acme: ScopeClient;
let apiUrl: string;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi({ SSE_MAX_BUFFER_BYTES: '65536', SSE_KEEPALIVE_MS: '100', SSE_RETRY_MS: '250', SSE_STALL_MS: String(STALL_MS) });
  await h.startWorker({ agents: [firehose] });
  apiUrl = api.url;
  acme = await h.client(api.url, 'acme', 'client');
});

/** Opens the stream and returns a reader the test drives by hand (so it can stall it). */
async function open(runId: string, lastEventId?: string) {
  const headers: Record<string, string> = { ...acme.headers, accept: 'text/event-stream' };
  if (lastEventId) headers['last-event-id'] = lastEventId;
  const res = await fetch(`${apiUrl}/v1/scopes/acme/runs/${runId}/events`, { headers });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const parser = new SseParser();
  const decoder = new TextDecoder();
  /** Reads until the response ends or breaks; returns the events and how it stopped. */
  const drain = async (stopWhen?: (m: SseMessage[], raw: string) => boolean) => {
    const got: SseMessage[] = [];
    let raw = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return { got, raw, broken: false };
        const text = decoder.decode(value, { stream: true });
        raw += text;
        got.push(...parser.push(text));
        // Stop reading, but keep the connection: the test decides when to read on or cancel.
        if (stopWhen?.(got, raw)) return { got, raw, broken: false };
      }
    } catch {
      return { got, raw, broken: true };
    }
  };
  return { reader, drain };
}

const toSeen = (m: SseMessage[]): Seen[] => m.map((e) => ({ id: e.id!, type: e.event, data: JSON.parse(e.data) }));

describe('slow readers and idle streams', () => {
  it('a reader that stops reading is cut off (the run goes on) and resumes from its last id with nothing lost', async () => {
    const sub = await acme.submit('slow', 'go', { agent: 'firehose' });
    const runId = sub.body.id as string;
    const first = await open(runId);
    // Read up to the first token, then stall while the run produces 8 MiB.
    const head = await first.drain((got) => got.some((m) => m.event === 'token'));
    expect(head.got.length).toBeGreaterThan(0);
    readerHasFirstChunk();
    const run = await acme.waitStatus(runId, ['succeeded', 'failed']);
    expect(run.status).toBe('succeeded');
    // The reader is more than SSE_MAX_BUFFER_BYTES behind once a batch comes after that much is
    // pending. Should the rest of the run have come in one batch with its `end` (appends slowed
    // down by a loaded machine), the reader is cut for taking no byte for SSE_STALL_MS instead.
    await sleep(STALL_MS * 2.5);
    // What the server managed to send before it gave up on us, then the connection's end.
    const stalled = await first.drain();
    const firstPart = [...head.got, ...stalled.got];
    expect(firstPart.some((m) => m.event === 'end')).toBe(false);

    // It resumes from its last id, as a client does, until `end` (a loaded machine may keep
    // this process from reading for SSE_STALL_MS, and the server cuts it again).
    const rest: SseMessage[] = [];
    let resumes = 0;
    while (!rest.some((m) => m.event === 'end') && resumes < 20) {
      resumes++;
      const again = await open(runId, (rest.at(-1) ?? firstPart.at(-1)!).id);
      rest.push(...(await again.drain()).got);
    }
    const all = toSeen([...firstPart, ...rest]);
    expectExactly(all, await fullLog(h, 'acme', runId));
    const text = all.filter((e) => e.type === 'token').map((e) => (e.data as { text: string }).text).join('');
    expect(text.length).toBe(CHUNKS * CHUNK.length);
    console.log(`slow reader: cut off after ${firstPart.length} events (${stalled.broken ? 'connection reset' : 'closed'}), resumed for ${rest.length} more over ${resumes} connection(s)`);
  });

  it('an idle stream carries the retry hint and keep-alive comments', async () => {
    // No worker serves this runtime: the run waits, and its stream stays open and quiet.
    const sub = await acme.submit('idle', 'wait', { runtime: `${h.runtime}-none` });
    const s = await open(sub.body.id);
    const { raw } = await s.drain((_got, text) => (text.match(/: keep-alive/g) ?? []).length >= 2);
    expect(raw.startsWith('retry: 250\n\n')).toBe(true);
    expect(raw).toContain('event: status');
    await s.reader.cancel();
    await acme.post(`/runs/${sub.body.id}/cancel`, {});
  });

  it('a finished run stays readable for RETENTION_MS after its end, then its stream answers 404', async () => {
    const short = await useHarness({ RETENTION_MS: '1500' });
    const api = await short.startApi();
    await short.startWorker();
    const c = await short.client(api.url, 'acme', 'client');
    const sub = await c.submit('retained', 'soon gone');
    await c.waitStatus(sub.body.id, ['succeeded']);
    const now = await c.sse(`/runs/${sub.body.id}/events`);
    expect(now.status).toBe(200);
    expect(now.events.at(-1)!.event).toBe('end');
    await waitFor(async () => (await c.sse(`/runs/${sub.body.id}/events`)).status === 404, 15_000, 'the stream to expire');
    expect((await c.get(`/runs/${sub.body.id}`)).status).toBe(404);
  });
});

describe('an expired log', () => {
  it('a reader whose log is gone by the time it reads is finished, not kept open waiting for an end that never comes', async () => {
    const redis = createRedis({ url: h.redisUrl, name: 'test-expired' });
    const sub = createRedis({ url: h.redisUrl, name: 'test-expired-sub', blocking: true });
    track(redis, () => redis.quit());
    track(sub, () => sub.quit());
    const hub = new EventHub(sub, createLogger('silent'));
    const delivered: unknown[] = [];
    let ended = false;
    const follower = new EventFollower({
      redis, keys: h.keys, hub, scope: 'acme', runId: 'gone-run', afterId: '1-0',
      deliver: (events) => delivered.push(...events),
      onEnd: () => { ended = true; },
      onError: (err) => { throw err; },
    });
    await follower.start();
    expect(ended).toBe(true);
    expect(delivered).toEqual([]);
  });
});
