import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { BatonClient, type RunStreamEvent } from '../src/lib/client/client.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { fullLog, words } from './helpers/stream-check.ts';

let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

/** Resident set size of a process, from /proc (Linux), in MiB. */
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

describe('fan-out', () => {
  it('1,000 concurrent SSE clients on one API process and one run all receive every event', async () => {
    const clients = 1000;
    // One key holding a thousand streams, with the default caps (SSE_MAX_PER_KEY and the
    // scope's maxStreams admit a backend relaying that many chats with one key).
    const api = await h.spawn('api');
    const pid = api.process.pid!;
    const acme = await h.client(api.url!, 'acme', 'client');
    const client = new BatonClient({ url: api.url!, apiKey: acme.key, scope: 'acme' });
    const content = words(200, 'fan');
    // No worker yet: the run waits queued while every client connects, then streams live to all.
    const run = await client.submit({ sessionId: 'fanout', input: { content }, runtime: h.runtime, metadata: { delayMs: 5 } });
    const rssIdle = rssMiB(pid);

    const received: RunStreamEvent[][] = Array.from({ length: clients }, () => []);
    const t0 = Date.now();
    const readers = received.map(async (list) => {
      for await (const e of client.stream(run.id)) list.push(e);
    });
    await waitFor(() => received.every((l) => l.length > 0), 45_000, 'every client to receive the queued event');
    const connectMs = Date.now() - t0;
    const rssConnected = rssMiB(pid);
    // One subscriber connection per API process, however many clients follow the run.
    const [, subscribers] = (await h.redis.pubsub('NUMSUB', h.keys.scope('acme').live)) as [string, number];
    expect(Number(subscribers)).toBe(1);

    // The worker runs in its own process so the 1,000 readers in this one do not slow the agent.
    // Coarser coalescing (50 ms) keeps the event count, and this process's parsing work, modest.
    await h.spawn('worker', { env: { EMIT_FLUSH_MS: '50' } });
    let rssPeak = rssConnected;
    const sampler = setInterval(() => { rssPeak = Math.max(rssPeak, rssMiB(pid)); }, 100);
    const t1 = Date.now();
    try {
      await Promise.all(readers);
    } finally {
      clearInterval(sampler);
    }
    const streamMs = Date.now() - t1;

    const log = await fullLog(h, 'acme', run.id);
    const wantIds = log.map((e) => e.id).join(',');
    let tokenEvents = 0;
    for (const list of received) {
      expect(list.map((e) => e.id).join(',')).toBe(wantIds);
      expect(list.filter((e) => e.type === 'token').map((e) => (e as { data: { text: string } }).data.text).join('')).toBe(content);
      tokenEvents += list.filter((e) => e.type === 'token').length;
    }
    expect(received[0].map((e) => ({ id: e.id, type: e.type, data: e.data }))).toEqual(log);
    console.log(
      `fan-out: ${clients} clients connected in ${connectMs} ms; run streamed to all in ${streamMs} ms after the worker started ` +
      `(${log.length} events each, ${tokenEvents} token events delivered); API RSS ${rssIdle.toFixed(0)} MiB idle, ` +
      `${rssConnected.toFixed(0)} MiB with ${clients} clients, ${rssPeak.toFixed(0)} MiB peak while streaming`,
    );
  }, 120_000);
});
