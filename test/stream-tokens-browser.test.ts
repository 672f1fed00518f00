import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserContext, Page } from 'playwright-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { redisNowMs } from '../src/lib/redis/redis.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { launchBrowser, openPage, untilText, type WatchedPage } from './helpers/browser.ts';
import { skipWithout } from './helpers/programs.ts';
import { useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';
import { startSseProxy, type SseProxy } from './helpers/sse-proxy.ts';
import { expectExactly, fullLog, words, type Seen } from './helpers/stream-check.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

/**
 * A web page of another origin reads a run with the browser's own EventSource and a stream
 * token: no API key in the browser, no proxy of the user's own. Debian's Chromium (headless,
 * through playwright-core) loads the page from a tiny static server on another port; the API
 * is two real `baton api` child processes behind a proxy that stands in for a load balancer.
 * The one serving the stream is SIGKILLed mid-answer: the EventSource reconnects by itself,
 * with Last-Event-ID and the same token, to the other process, and ends with the exact answer.
 */

// ---- an agent that stops halfway until the test lets it go on ----

let releaseSecondHalf: () => void = () => {};
const secondHalf = new Promise<void>((resolve) => { releaseSecondHalf = resolve; });

const halves = defineAgent({
  name: 'tok-halves',
  async run(ctx) {
    const parts = ctx.input.content.split(' ');
    for (let i = 0; i < parts.length; i++) {
      if (i === parts.length / 2) {
        await Promise.race([secondHalf, new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }))]);
        if (ctx.signal.aborted) throw ctx.signal.reason;
      }
      ctx.emit(i === 0 ? parts[i] : ` ${parts[i]}`);
    }
    return { answer: parts.join(' ') };
  },
});

// ---- the page: what a chat page of the tenant's own site would do ----

/**
 * Opens `#events=<url>` (the events URL with `?access_token=`) with a plain EventSource, shows
 * the answer as it streams, and keeps what it saw for the test. Everything is in the fragment,
 * which never reaches the page's server.
 */
const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Answer</title><link rel="icon" href="data:,"></head>
<body>
<pre id="answer"></pre>
<p id="state">connecting</p>
<script>
  const url = new URLSearchParams(location.hash.slice(1)).get('events');
  const answer = document.getElementById('answer');
  const state = document.getElementById('state');
  window.seen = [];
  window.errors = 0;
  const es = new EventSource(url);
  es.onopen = () => { state.textContent = 'open'; };
  es.onerror = () => {
    window.errors++;
    state.textContent = es.readyState === EventSource.CLOSED ? 'refused' : 'reconnecting';
  };
  for (const type of ['status', 'attempt', 'token', 'ephemeral', 'end']) {
    es.addEventListener(type, (ev) => {
      const data = JSON.parse(ev.data);
      window.seen.push({ id: ev.lastEventId, type, data });
      if (type === 'attempt') answer.textContent = '';
      if (type === 'token') answer.textContent += data.text;
      if (type === 'end') {
        es.close();
        state.textContent = 'ended ' + data.status;
      }
    });
  }
</script>
</body></html>`;

/** A static server for the page: another port, so another origin than the API's. */
async function pageServer(): Promise<{ origin: string }> {
  const server: Server = createServer((req, res) => {
    if (req.url !== '/page.html') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(PAGE);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  track(server, () => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

// ---- setup ----

let h: Harness;
let browser: BrowserContext;
let page: { origin: string };
let stranger: { origin: string };
let api1: Child;
let api2: Child;
let proxy: SseProxy;
let acme: ScopeClient;
let pages: WatchedPage[] = [];

beforeAll(async () => {
  h = await useHarness();
  await h.startWorker({ agents: [halves] });
  page = await pageServer();
  // A page of an origin the deployment did not list.
  stranger = await pageServer();
  const env = { CORS_ORIGINS: page.origin, SSE_RETRY_MS: '200' };
  api1 = await h.spawn('api', { env });
  api2 = await h.spawn('api', { env });
  proxy = await startSseProxy(api1.url!);
  // The page's backend holds the key; the browser never does.
  acme = await h.client(proxy.url, 'acme', 'client');
  browser = await launchBrowser();
});

afterEach(async () => {
  for (const p of pages) await p.page.close();
  pages = [];
});

async function open(origin: string, eventsUrl: string): Promise<WatchedPage> {
  const w = await openPage(browser);
  pages.push(w);
  await w.page.goto(`${origin}/page.html#events=${encodeURIComponent(eventsUrl)}`);
  return w;
}

const eventsUrl = (base: string, runId: string, token: string) =>
  `${base}/v1/scopes/acme/runs/${runId}/events?access_token=${encodeURIComponent(token)}`;
const seenBy = (p: Page) => p.evaluate(() => (window as unknown as { seen: Seen[] }).seen);

describe.skipIf(noChromium)('a page of another origin with a stream token', () => {
  it('streams every token with a native EventSource, rides out the death of its API process and ends with the exact answer', async () => {
    const content = words(40, 'page');
    const firstHalf = content.split(' ').slice(0, 20).join(' ');
    const sub = await acme.submit('page-1', content, { agent: 'tok-halves', streamToken: true });
    expect(sub.status).toBe(202);
    const runId = sub.body.id as string;
    const w = await open(page.origin, eventsUrl(proxy.url, runId, sub.body.streamToken.token));

    await untilText(w.page.locator('#answer'), firstHalf);
    expect((await call(proxy.url, 'GET', `/v1/scopes/acme/runs/${runId}`, undefined, acme.headers)).body.status).toBe('running');
    // The load balancer sends new connections to the other process; this one dies at once.
    proxy.target = api2.url!;
    await api1.kill('SIGKILL');
    releaseSecondHalf();

    await untilText(w.page.locator('#state'), 'ended succeeded');
    expect(await w.page.locator('#answer').textContent()).toBe(content);
    // Every event of the run exactly once, in order, across both processes.
    expectExactly(await seenBy(w.page), await fullLog(h, 'acme', runId));
    // The browser resumed by itself: on the second process, with the id it last had.
    const resumed = proxy.requests.filter((r) => r.target === api2.url && r.method === 'GET' && r.lastEventId !== undefined);
    expect(resumed.length).toBeGreaterThanOrEqual(1);
    expect(await w.page.evaluate(() => (window as unknown as { errors: number }).errors)).toBeGreaterThanOrEqual(1);
    // Only the dropped connection is reported; no CORS or CSP complaint.
    expect(w.errors.filter((e) => !/net::ERR_/.test(e))).toEqual([]);
    console.log(`requests through the proxy: ${JSON.stringify(proxy.requests.map((r) => ({ ...r, target: r.target === api2.url ? 'api2' : 'api1' })))}`);
  });

  it('gets nothing with an expired token or a token of another run', async () => {
    const runId = (await acme.submit('page-2', 'a finished run', { streamToken: true })).body.id as string;
    const other = (await acme.submit('page-3', 'another run', { streamToken: true })).body;
    await acme.waitStatus(runId, ['succeeded']);
    // A token minted by an API process whose tokens last 1 s, used on another one after that.
    const short = await h.startApi({ STREAM_TOKEN_TTL_MS: '1000' });
    const minted = await call(short.url, 'POST', `/v1/scopes/acme/runs/${runId}/stream-token`, {}, acme.headers);
    await waitFor(async () => (await redisNowMs(h.redis)) > Date.parse(minted.body.expiresAt), 10_000, 'the token to expire');

    for (const [what, token] of [['expired', minted.body.token], ['of another run', other.streamToken.token]]) {
      const w = await open(page.origin, eventsUrl(proxy.url, runId, token));
      await untilText(w.page.locator('#state'), 'refused', what);
      expect(await seenBy(w.page), what).toEqual([]);
    }
    // The page's own token for that other run works, on the same page.
    const w = await open(page.origin, eventsUrl(proxy.url, other.id, other.streamToken.token));
    await untilText(w.page.locator('#state'), 'ended succeeded');
  });

  it('cannot submit or cancel with its token, whether or not the browser lets the request out', async () => {
    const sub = await acme.submit('page-4', 'stays queued', { runtime: `${h.runtime}-nobody`, streamToken: true });
    const runId = sub.body.id as string;
    const token = sub.body.streamToken.token as string;
    const w = await open(page.origin, eventsUrl(proxy.url, runId, token));
    await untilText(w.page.locator('#state'), 'open');
    const sent = (method: string) => proxy.requests.filter((r) => r.method === method).length;
    const [postsBefore, preflightsBefore] = [sent('POST'), sent('OPTIONS')];
    const outcomes = await w.page.evaluate(async ({ base, runId, token }) => {
      const q = `?access_token=${encodeURIComponent(token)}`;
      const tries: [string, RequestInit][] = [
        [`${base}/v1/scopes/acme/runs${q}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sessionId: 'page-4', input: { content: 'forged' } }) }],
        [`${base}/v1/scopes/acme/runs${q}`, { method: 'POST', mode: 'no-cors', body: JSON.stringify({ sessionId: 'page-4', input: { content: 'forged' } }) }],
        [`${base}/v1/scopes/acme/runs/${runId}/cancel${q}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }],
        [`${base}/v1/scopes/acme/runs/${runId}/cancel${q}`, { method: 'POST', mode: 'no-cors' }],
        [`${base}/v1/scopes/acme/runs/${runId}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${token}` } }],
      ];
      const out: string[] = [];
      for (const [url, init] of tries) {
        try {
          const res = await fetch(url, init);
          out.push(`${res.type} ${res.status}`);
        } catch {
          out.push('blocked');
        }
      }
      return out;
    }, { base: proxy.url, runId, token });
    // None gets an answer the page may read: a CORS request is stopped at its preflight (no
    // CORS headers on those routes), a no-cors one is sent but its answer withheld (helmet's
    // Cross-Origin-Resource-Policy: same-origin).
    expect(outcomes).toEqual(['blocked', 'blocked', 'blocked', 'blocked', 'blocked']);
    expect(sent('OPTIONS') - preflightsBefore).toBe(3);
    expect(sent('POST') - postsBefore).toBe(2);
    // What the API did with them: nothing.
    const run = (await acme.get(`/runs/${runId}`)).body;
    expect(run.status).toBe('queued');
    expect(run.cancelRequested).toBeUndefined();
    expect((await acme.get('/runs?sessionId=page-4')).body.runs.map((r: { id: string }) => r.id)).toEqual([runId]);
    expect((await acme.post(`/runs/${runId}/cancel`, {})).body.status).toBe('cancelled');
  });

  it('of an origin not in CORS_ORIGINS gets no CORS headers, so its browser keeps the stream from it', async () => {
    const sub = await acme.submit('page-5', 'for listed origins only', { streamToken: true });
    await acme.waitStatus(sub.body.id, ['succeeded']);
    const url = eventsUrl(proxy.url, sub.body.id, sub.body.streamToken.token);
    const w = await open(stranger.origin, url);
    await untilText(w.page.locator('#state'), 'refused');
    expect(await seenBy(w.page)).toEqual([]);
    expect(w.errors.some((e) => e.includes('CORS')), w.errors.join('\n')).toBe(true);
    // The same request as the browser sent it: a valid token, but no header for that origin.
    const res = await fetch(url, { headers: { origin: stranger.origin, accept: 'text/event-stream' } });
    await res.text();
    expect(res.status).toBe(200);
    expect([...res.headers.keys()].filter((k) => k.startsWith('access-control-'))).toEqual([]);
    // And the listed origin's page reads it.
    const listed = await open(page.origin, url);
    await untilText(listed.page.locator('#state'), 'ended succeeded');
    expect(await listed.page.locator('#answer').textContent()).toBe('for listed origins only');
  });
});
