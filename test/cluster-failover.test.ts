import { Redis } from 'ioredis';
import { beforeAll, expect, it } from 'vitest';
import { BatonApiError, BatonClient } from '../src/lib/client/client.ts';
import { startCluster, type LocalCluster } from './helpers/cluster.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';
import { fullLog, readToEnd, runIfKept, words, writtenAfter, type RunReader } from './helpers/stream-check.ts';

/**
 * A Redis Cluster whose primary of a scope's slot is SIGKILLed while the scope's runs stream:
 * its replica takes over (cluster-node-timeout 2 s), and the API and worker processes follow
 * it with no restart, with each LIVE_PUBSUB: the subscriptions move to the new primary (with
 * `sharded` they are on the scope's node itself), readers read on and end. Without
 * REDIS_MIN_REPLICAS_ACK (which a Cluster does not take), what the primary acknowledged and had
 * not passed on is lost with it: a run or a reader's last events may be, and are counted.
 */
let cluster: LocalCluster;
let h: Harness;

beforeAll(async () => {
  cluster = await startCluster(3, { replicas: 1, nodeTimeoutMs: 2_000 });
  track(cluster, () => cluster.stop());
  // Every replica synced with its primary before anything is killed.
  for (const port of cluster.ports.slice(3)) {
    const r = new Redis(port, '127.0.0.1');
    track(r, async () => r.disconnect());
    await waitFor(async () => /master_link_status:up/.test(await r.info('replication')), 20_000, `the replica on ${port} to sync`);
  }
  h = await useHarness({ REDIS_URL: cluster.url });
}, 90_000);

// One scope a setting, each on a primary not killed before (the first test's kill leaves its
// node's replica as a primary without a replica of its own).
const cases = [['classic', 0], ['sharded', 1]] as const;

for (const [mode, nth] of cases) {
  it(`LIVE_PUBSUB=${mode}: the scope's primary SIGKILLed mid-stream; its replica takes over, runs end, readers read on to their end`, async () => {
    const env = { LIVE_PUBSUB: mode };
    const api = await h.spawn('api', { env });
    const worker = await h.spawn('worker', { env });
    // A scope whose slot is on the nth of the primaries the cluster was made with.
    const primaries = cluster.ports.slice(0, 3);
    let scope = '';
    for (let i = 0; !scope && i < 200; i++) {
      const candidate = `fo-${mode}-${i}`;
      if (await cluster.primaryOf(h.keys.scope(candidate).meta, primaries[2]) === primaries[nth]) scope = candidate;
    }
    expect(scope).not.toBe('');
    const client = new BatonClient({ url: api.url!, apiKey: await h.key(scope), scope });

    // Runs of 60 tokens 50 ms apart: about 3 s each, so the failover lands in their middle.
    const readers: RunReader[] = [];
    for (let i = 0; i < 4; i++) {
      const content = words(60, `${mode}${i}-`);
      const run = await client.submit({ sessionId: `fo-${i}`, input: { content }, runtime: h.runtime, metadata: { delayMs: 50 } });
      readers.push(readToEnd(client, run.id, content));
    }
    await waitFor(() => readers.every((r) => r.events.filter((e) => e.type === 'token').length >= 5), 30_000, 'every reader to see tokens');

    const killed = primaries[nth];
    await cluster.kill(killed);
    const failedAt = Date.now();
    // The third primary is never killed: it is asked.
    await waitFor(async () => (await cluster.primaryOf(h.keys.scope(scope).meta, primaries[2])) !== killed, 30_000, 'the replica to be promoted');

    // A run submitted after the failover streams whole.
    const after = words(20, `${mode}-after-`);
    const late = await waitFor(() => client.submit({ sessionId: 'fo-after', input: { content: after }, runtime: h.runtime, metadata: { delayMs: 20 } })
      .catch((err: unknown) => {
        if (err instanceof BatonApiError && err.status >= 500) return undefined;
        throw err;
      }), 30_000, 'a submit accepted after the failover');
    const lateReader = readToEnd(client, late.id, after);

    await Promise.all([...readers, lateReader].map((r) => r.done));
    const lost: string[] = [];
    let unreplicated = 0;
    let readOn = 0;
    for (const r of readers) {
      const run = await runIfKept(client, r.runId);
      if (!run) {
        lost.push(r.runId);
        continue;
      }
      expect(run.status).toBe('succeeded');
      const ids = r.events.map((e) => e.id);
      expect(new Set(ids).size, `reader of ${r.runId} was sent an event twice`).toBe(ids.length);
      expect(r.events.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded', result: { answer: r.content } } });
      // It was sent every event the log holds; what it was sent that the log lacks is counted.
      const log = await fullLog(h, scope, r.runId);
      const seen = new Set(ids);
      expect(log.filter((e) => !seen.has(e.id)).map((e) => e.id), `reader of ${r.runId} missed events`).toEqual([]);
      const inLog = new Set(log.map((e) => e.id));
      unreplicated += ids.filter((id) => !inLog.has(id)).length;
      // Written by the new primary.
      if (r.events.some((e) => writtenAfter(e.id, failedAt))) readOn++;
    }
    const lateEvents = lateReader.events;
    expect(lateEvents.filter((e) => e.type === 'token').map((e) => (e.data as { text: string }).text).join('')).toBe(after);
    expect(lateEvents.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded' } });
    console.log(`[cluster-failover] ${mode}: ${readers.length} streamed runs, ${readOn} read on past the failover, ${lost.length} lost with the old primary, ${unreplicated} events seen but not replicated`);
    expect(readOn).toBeGreaterThan(0);
    await Promise.all([api.close(), worker.close()]);
  }, 120_000);
}
