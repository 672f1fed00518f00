import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import type { BrowserContext, Request } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/lib/logger.ts';
import { defineAgent, type RunContext } from '../src/lib/sdk/agent.ts';
import { createBatonRouter } from '../src/server.ts';
import { ensureUiBuilt, launchBrowser, openPage, untilText, artifactPath } from './helpers/browser.ts';
import { skipWithout } from './helpers/programs.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

/**
 * The run inspector with the API mounted in a host Express app under /agents (the way the
 * README embeds it), in Debian's Chromium under the API's CSP: it loads, logs in, lists and
 * shows a run, with every file and API call under the mount path, and shows a run's
 * duration, token usage and cost (the API has a price table).
 */

/** A run that makes two model calls, then holds until the test lets it go on. */
const holds = new Map<string, () => void>();
const until = (ctx: RunContext) => new Promise<void>((resolve) => {
  holds.set(ctx.runId, resolve);
  ctx.signal.addEventListener('abort', () => resolve(), { once: true });
});
const metered = defineAgent({
  name: 'metered',
  async run(ctx) {
    await ctx.infer('draft', (call) => {
      call.recordUsage({ model: 'house-model', inputTokens: 400, outputTokens: 150 });
      return 'draft';
    });
    await ctx.infer('polish', (call) => {
      call.recordUsage({ model: 'house-model', inputTokens: 200, outputTokens: 50 });
      return 'polish';
    });
    if (ctx.metadata.hold) await until(ctx);
    ctx.emit('metered answer');
    return 'metered answer';
  },
});

/** USD per million tokens: 600 in and 200 out cost 0.0015 + 0.002. */
const MODEL_PRICES = JSON.stringify({ 'house-model': { inputPerMTokens: 2.5, outputPerMTokens: 10 } });

let h: Harness;
let host: string;
let browser: BrowserContext;

beforeAll(async () => {
  ensureUiBuilt();
  h = await useHarness();
  const baton = await createBatonRouter({ config: h.configWith({ MODEL_PRICES }), redisUrl: h.redisUrl, log: createLogger('silent') });
  track(baton, () => baton.close());
  const app = express();
  app.get('/', (_req, res) => void res.type('text').send("the host's own page"));
  app.use('/agents', baton.router);
  const server: Server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  track(server, () => new Promise((resolve) => server.close(resolve)));
  host = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  await h.startWorker({ agents: [metered] });
  browser = await launchBrowser();
});

describe.skipIf(noChromium)('the run inspector under a mount path', () => {
  it('loads at /agents, logs in with a key, lists a run and shows its duration, tokens and cost', async () => {
    const key = await h.key('acme', 'admin');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const submit = async (sessionId: string, metadata: Record<string, unknown>) => {
      const res = await fetch(`${host}/agents/v1/scopes/acme/runs`, {
        method: 'POST', headers, body: JSON.stringify({ sessionId, input: { content: 'count me' }, agent: 'metered', runtime: h.runtime, metadata }),
      });
      expect(res.status).toBe(202);
      return ((await res.json()) as { id: string }).id;
    };
    const runId = await submit('mounted-live', { hold: true });
    await waitFor(() => holds.has(runId), 20_000, 'the run to hold');

    const w = await openPage(browser);
    const requests: Request[] = [];
    w.page.on('request', (r) => requests.push(r));
    const first = await w.page.goto(`${host}/agents`);
    expect(new URL(w.page.url()).pathname).toBe('/agents/ui');
    expect(first!.headers()['content-security-policy']).toContain("script-src 'self'");

    await w.page.getByLabel('API key').fill(key);
    await w.page.keyboard.press('Enter');
    await untilText(w.page.locator('.who'), 'scope acme · admin key');
    const link = w.page.getByRole('link', { name: runId });
    await link.waitFor();
    await link.click();
    expect(w.page.url()).toBe(`${host}/agents/ui/runs/${runId}`);

    // Still running: the duration counts up, and the calls made so far are already counted.
    const summary = w.page.locator('dl.summary');
    const usage = w.page.locator('dl.usage');
    await untilText(summary, (t) => /Durationrunning for \d/.test(t), 'the running duration');
    await untilText(usage, (t) => t.includes('Model calls2') && t.includes('Input tokens600') && t.includes('Output tokens200'), 'the usage so far');
    expect(await usage.textContent()).toContain('Total tokens800');
    expect(await usage.textContent()).toContain('Modelhouse-model');
    expect(await usage.textContent()).toContain('Cost$0.0035');

    holds.get(runId)!();
    await untilText(w.page.locator('h1 .badge'), 'succeeded');
    await untilText(w.page.locator('pre.answer'), 'metered answer');
    await untilText(summary, (t) => /Duration(\d+ ms|\d+(\.\d)? s)/.test(t), 'the finished duration');

    // A link straight to a run's view, deep under the mount, loads the app as well.
    const done = await submit('mounted-done', {});
    const deep = await openPage(browser);
    deep.page.on('request', (r) => requests.push(r));
    await deep.page.goto(`${host}/agents/ui/runs/${done}#key=${encodeURIComponent(key)}`);
    await untilText(deep.page.locator('h1 .badge'), 'succeeded');
    await untilText(deep.page.locator('dl.usage'), (t) => t.includes('Cost$0.0035'), 'the cost');

    // At a phone's width the page reads without sideways scrolling.
    await deep.page.setViewportSize({ width: 390, height: 900 });
    const { scroll, width } = await deep.page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, width: innerWidth }));
    expect(scroll).toBeLessThanOrEqual(width);
    await deep.page.screenshot({ path: artifactPath('mounted-run-view-390.png'), fullPage: true });

    // Every file and every API call of the app was under the mount path, none failed, and
    // nothing broke the CSP (a violation is a console error).
    const paths = requests.map((r) => new URL(r.url()).pathname);
    expect(paths.filter((p) => !p.startsWith('/agents/'))).toEqual(['/agents']);
    expect(paths).toContain(`/agents/v1/scopes/acme/runs/${runId}/usage`);
    expect(paths.some((p) => /^\/agents\/ui\/assets\/index-[\w-]+\.js$/.test(p))).toBe(true);
    const failed = await Promise.all(requests.map(async (r) => ({ url: r.url(), status: (await r.response())?.status() })));
    expect(failed.filter((r) => r.status !== undefined && r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
    expect(deep.errors).toEqual([]);
    await w.page.close();
    await deep.page.close();
  });
});
