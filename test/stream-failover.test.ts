import { EventSource } from 'eventsource';
import { beforeAll, describe, expect, it } from 'vitest';
import { BatonClient, type RunStreamEvent } from '../src/lib/client/client.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { startSseProxy } from './helpers/sse-proxy.ts';
import { expectExactly, fullLog, words, type Seen } from './helpers/stream-check.ts';

let h: Harness;

beforeAll(async () => {
  h = await useHarness();
  await h.startWorker();
});

const asSeen = (events: RunStreamEvent[]): Seen[] => events.map((e) => ({ id: e.id, type: e.type, data: e.data }));

describe('streams across API processes', () => {
  it('the API process serving a stream is killed: the client resumes on another API process and loses nothing', async () => {
    const api1 = await h.spawn('api');
    const api2 = await h.spawn('api');
    const proxy = await startSseProxy(api1.url!);
    const acme: ScopeClient = await h.client(api1.url!, 'acme', 'client');
    const client = new BatonClient({ url: proxy.url, apiKey: acme.key, scope: 'acme' });

    const content = words(400, 'fail');
    const run = await client.submit({ sessionId: 'failover', input: { content }, runtime: h.runtime, metadata: { delayMs: 4 } });
    const got: RunStreamEvent[] = [];
    let killedAt = -1;
    for await (const e of client.stream(run.id)) {
      got.push(e);
      if (killedAt < 0 && got.filter((x) => x.type === 'token').length === 10) {
        killedAt = got.length;
        // The load balancer notices the dead backend and sends new connections to the other one.
        proxy.target = api2.url!;
        await api1.kill('SIGKILL');
      }
    }
    expect(killedAt).toBeGreaterThan(0);
    expect(got.at(-1)).toMatchObject({ type: 'end', data: { status: 'succeeded' } });
    expect(got.filter((e) => e.type === 'token').map((e) => (e as { data: { text: string } }).data.text).join('')).toBe(content);
    expectExactly(asSeen(got), await fullLog(h, 'acme', run.id));
    expect(proxy.served.get(api2.url!) ?? 0).toBeGreaterThanOrEqual(1);
    console.log(`api killed after ${killedAt} events; ${got.length - killedAt} more came from the second API process (${proxy.served.get(api2.url!)} request(s))`);
  });

  it('a real EventSource client (eventsource package) resumes with Last-Event-ID after the server drops it', async () => {
    const api = await h.startApi({ SSE_RETRY_MS: '100' });
    const acme = await h.client(api.url, 'acme', 'client');
    // Every stream is cut after 5 events, as a flaky proxy would.
    const proxy = await startSseProxy(api.url, { cutAfterEvents: () => 5 });
    const content = words(60, 'es');
    const sub = await acme.submit('eventsource', content, { metadata: { delayMs: 10 } });
    const runId = sub.body.id as string;

    const got: Seen[] = [];
    let errors = 0;
    const es = new EventSource(`${proxy.url}/v1/scopes/acme/runs/${runId}/events`, {
      fetch: (url, init) => fetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${acme.key}` } }),
    });
    const done = new Promise<void>((resolve) => {
      for (const type of ['status', 'attempt', 'token', 'ephemeral', 'end']) {
        es.addEventListener(type, (ev) => {
          got.push({ id: ev.lastEventId, type, data: JSON.parse(ev.data) });
          if (type === 'end') {
            es.close();
            resolve();
          }
        });
      }
      es.addEventListener('error', () => { errors++; });
    });
    try {
      await done;
    } finally {
      es.close();
    }
    const log = await fullLog(h, 'acme', runId);
    expectExactly(got, log);
    expect(proxy.cuts).toBeGreaterThanOrEqual(Math.floor(log.length / 5) - 1);
    console.log(`eventsource: ${log.length} events over ${proxy.cuts + 1} connections (${errors} reconnects reported by the client)`);
    await waitFor(async () => (await acme.get(`/runs/${runId}`)).body.status === 'succeeded', 10_000, 'run succeeded');
  });
});
