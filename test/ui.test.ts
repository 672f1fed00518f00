import type { BrowserContext, Page } from 'playwright-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import { z } from 'zod';
import { createChatAgent, defineTool } from '../src/lib/agents/chat.ts';
import { defineAgent, type RunContext } from '../src/lib/sdk/agent.ts';
import { ToolDeclinedError } from '../src/lib/sdk/errors.ts';
import { charge, flaky } from './fixtures/engine-agents.ts';
import { answer as says, callTools, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { artifactPath, ensureUiBuilt, launchBrowser, openPage, untilText, type WatchedPage } from './helpers/browser.ts';
import { skipWithout } from './helpers/programs.ts';
import { FIXTURE, fx, fxSet, useFixturesInProcess } from './helpers/engine.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { startSseProxy } from './helpers/sse-proxy.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

/**
 * The run inspector in a real browser (Debian's Chromium through playwright-core), served by
 * a real API under its real helmet CSP, with real workers on a real Redis. Every page must
 * load and work with no console error (a CSP violation is one).
 */

// ---- an agent the test steps through: each release lets one more word of the answer out ----

const released = new Map<string, number>();
const wakers = new Map<string, () => void>();

function release(runId: string): void {
  released.set(runId, (released.get(runId) ?? 0) + 1);
  wakers.get(runId)?.();
}

async function gate(ctx: RunContext, n: number): Promise<void> {
  while ((released.get(ctx.runId) ?? 0) < n) {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    await new Promise<void>((resolve) => {
      wakers.set(ctx.runId, resolve);
      ctx.signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }
}

/** Two memoized steps and a notice, then the input's words as the answer, one per release when `metadata.gated`. */
const talk = defineAgent({
  name: 'ui-talk',
  async run(ctx) {
    const words = ctx.input.content.split(' ');
    await ctx.step('plan', () => ({ words: words.length }));
    await ctx.tool('lookup', { q: words[0] }, () => `found ${words[0]}`);
    ctx.emit('warming up', { ephemeral: true });
    for (let i = 0; i < words.length; i++) {
      if (i > 0 && ctx.metadata.gated) await gate(ctx, i);
      ctx.emit(i === 0 ? words[i] : ` ${words[i]}`);
    }
    return { answer: words.join(' ') };
  },
});

/** Two approval-gated tools and an input with a JSON Schema, all at once; declines are caught. */
const declined = (err: unknown) => {
  if (err instanceof ToolDeclinedError) return `${err.tool} declined: ${err.reason}`;
  throw err;
};
const waiting = defineAgent({
  name: 'ui-waits',
  async run(ctx) {
    const [ship, notify, details] = await Promise.all([
      ctx.tool('ship', { to: 'prod' }, () => 'shipped to prod', { approval: true }).catch(declined),
      ctx.tool('notify', { channel: '#ops' }, () => 'notified', { approval: true }).catch(declined),
      ctx.waitFor('details', {
        prompt: 'What should go out?',
        schema: {
          type: 'object', required: ['count', 'color'],
          properties: {
            count: { type: 'integer', title: 'How many' },
            color: { enum: ['red', 'green'], title: 'Colour' },
            urgent: { type: 'boolean', title: 'Urgent' },
            note: { type: 'string', title: 'Note', maxLength: 80 },
          },
        },
      }),
    ]);
    return `${ship}; ${notify}; ${JSON.stringify(details)}`;
  },
});

// ---- setup ----

let h: Harness;
let api: ApiHandle;
let acme: ScopeClient;
let browser: BrowserContext;
let pages: WatchedPage[] = [];
let fake: FakeOpenAI;

/** A tool-calling agent on the fake model server: its tool calls and results are run events. */
const forecaster = (baseURL: string) => createChatAgent({
  name: 'ui-forecaster', model: 'fake-model', baseURL, apiKey: 'test-key',
  tools: {
    weather: defineTool({
      description: 'Current temperature in a city, in °C.',
      parameters: z.object({ city: z.string() }),
      execute: ({ city }) => ({ city, tempC: 21 }),
    }),
  },
});

beforeAll(async () => {
  ensureUiBuilt();
  h = await useHarness();
  useFixturesInProcess(h);
  fake = await startFakeOpenAI();
  api = await h.startApi();
  await h.startWorker({ agents: [talk, flaky, forecaster(fake.baseURL), waiting] });
  acme = await h.client(api.url, 'acme', 'admin');
  browser = await launchBrowser();
});

afterEach(async () => {
  for (const p of pages) await p.page.close();
  pages = [];
});

/** A tab logged in with `key` through the URL fragment, as a printed link would open it. */
async function loggedIn(key: string, path = '/ui'): Promise<WatchedPage> {
  const w = await openPage(browser);
  pages.push(w);
  await w.page.goto(`${api.url}${path}#key=${encodeURIComponent(key)}`);
  await w.page.getByRole('button', { name: 'Log out' }).waitFor();
  return w;
}

const ui = (path: string) => `${api.url}/ui${path}`;
const answer = (page: Page) => page.locator('pre.answer');
const statusBadge = (page: Page) => page.locator('h1 .badge');

describe.skipIf(noChromium)('run inspector', () => {
  it('serves the app at /ui under the API CSP and logs in with a key typed at the keyboard', async () => {
    const w = await openPage(browser);
    pages.push(w);
    const root = await w.page.goto(`${api.url}/`);
    // `/` redirected to /ui, and the page came with helmet's CSP: scripts from 'self' only.
    expect(new URL(w.page.url()).pathname).toBe('/ui');
    const csp = root!.headers()['content-security-policy'];
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("default-src 'self'");
    expect(csp).not.toContain('unsafe-eval');

    await w.page.getByLabel('API key').waitFor();
    // Keyboard only: focus moves to the key field, Enter submits.
    await w.page.keyboard.press('Tab');
    const focused = await w.page.evaluate(() => document.activeElement?.id);
    expect(focused).toBe('api-key');
    await w.page.keyboard.type('bk_not-a-key-anyone-issued-0000');
    await w.page.keyboard.press('Enter');
    await untilText(w.page.getByRole('alert'), 'That key is not valid (unknown or revoked).');
    expect(w.errors.filter((e) => !e.includes('401'))).toEqual([]);
    w.errors.length = 0;

    await w.page.getByLabel('API key').fill(acme.key);
    await w.page.keyboard.press('Enter');
    await untilText(w.page.locator('.who'), 'scope acme · admin key');
    // The key is in this tab's sessionStorage, and in no URL.
    expect(await w.page.evaluate(() => sessionStorage.getItem('baton.inspector.key'))).toBe(acme.key);
    expect(w.page.url()).not.toContain(acme.key);
    // A reload keeps the tab logged in.
    await w.page.reload();
    await untilText(w.page.locator('.who'), 'scope acme · admin key');
    expect(w.errors).toEqual([]);
  });

  it('takes a key from the link fragment and removes it from the address bar', async () => {
    const client = await h.key('acme', 'client');
    const w = await loggedIn(client, '/ui/runtimes');
    expect(w.page.url()).toBe(ui('/runtimes'));
    await untilText(w.page.locator('.who'), 'scope acme · client key');
    expect(w.errors).toEqual([]);
    // The entry with the key was replaced, not kept: going back leaves the app.
    await w.page.goBack();
    expect(w.page.url()).toBe('about:blank');
  });

  it("asks before a link's key of another scope replaces the tab's login, and stays when declined", async () => {
    const globex = await h.key('globex', 'admin');
    const w = await loggedIn(acme.key, '/ui/runs');
    await untilText(w.page.locator('.who'), 'scope acme · admin key');
    const who = w.page.locator('.who');
    const stored = () => w.page.evaluate(() => sessionStorage.getItem('baton.inspector.key'));

    // A link opened in this tab (a page load): asked, not switched; the key is out of the address bar.
    await w.page.goto(`${ui('/runtimes')}#key=${encodeURIComponent(globex)}`);
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Switch to scope globex?');
    expect(w.page.url()).toBe(ui('/runtimes'));
    expect(await w.page.locator('main').textContent()).toContain('This tab is logged in to scope acme (admin key)');
    expect(await stored()).toBe(acme.key);
    await w.page.getByRole('button', { name: 'Stay on scope acme' }).click();
    await untilText(who, 'scope acme · admin key');
    expect(await stored()).toBe(acme.key);
    await w.page.reload();
    await untilText(who, 'scope acme · admin key');

    // The same link followed without a page load (only the fragment changes): asked again; agreed, it switches.
    await w.page.goto(`${ui('/runtimes')}#key=${encodeURIComponent(globex)}`);
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Switch to scope globex?');
    await w.page.getByRole('button', { name: 'Switch to scope globex' }).click();
    await untilText(who, 'scope globex · admin key');
    expect(await stored()).toBe(globex);

    // Another role of the same scope asks too; a key the API refuses changes nothing and says so.
    await w.page.goto(`${ui('/runs')}#key=${encodeURIComponent(await h.key('globex', 'client'))}`);
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Switch to the client key?');
    await w.page.getByRole('button', { name: 'Stay on the admin key' }).click();
    await untilText(who, 'scope globex · admin key');
    await w.page.goto(`${ui('/runs')}#key=bk_not-a-key-anyone-issued-0000`);
    await untilText(w.page.getByRole('status').filter({ hasText: "The link's key was not used" }), (t) => t.includes('not valid'));
    await untilText(who, 'scope globex · admin key');
    expect(await stored()).toBe(globex);
    expect(w.page.url()).toBe(ui('/runs'));
    // The only console lines are the browser's own note of the refused key's 401.
    expect(w.errors.filter((e) => !/status of 401/.test(e))).toEqual([]);
  });

  it('shows a run in the list and its tokens in the run view as they are produced', async () => {
    const w = await loggedIn(acme.key);
    const run = (await acme.submit('ui-live', 'alpha beta gamma', { agent: 'ui-talk', metadata: { gated: true } })).body;
    const link = w.page.getByRole('link', { name: run.id });
    await link.waitFor();
    await link.click();
    expect(w.page.url()).toBe(ui(`/runs/${run.id}`));

    await untilText(answer(w.page), 'alpha');
    // The page shows the first word while the run is still producing the rest.
    expect((await acme.get(`/runs/${run.id}`)).body.status).toBe('running');
    await untilText(statusBadge(w.page), 'running');
    release(run.id);
    await untilText(answer(w.page), 'alpha beta');
    release(run.id);
    await untilText(answer(w.page), 'alpha beta gamma');
    await untilText(statusBadge(w.page), 'succeeded');
    await untilText(w.page.locator('.stream-state'), 'Stream complete.');

    // The notice, the memoized steps with their values, and the event timeline.
    await untilText(w.page.locator('.notices'), 'warming up');
    const steps = w.page.locator('table.steps tbody tr');
    await waitFor(async () => (await steps.count()) === 2, 10_000, 'two steps');
    expect((await steps.nth(0).textContent())!).toContain('step:plan:1');
    expect((await steps.nth(0).textContent())!).toContain('{"words":3}');
    expect((await steps.nth(1).textContent())!).toContain('tool:lookup:1');
    expect((await steps.nth(1).textContent())!).toContain('"found alpha"');
    const timeline = await w.page.locator('ol.timeline').textContent();
    for (const piece of ['queued', 'running', 'attempt 1 of 3', 'warming up', 'succeeded (stop)']) expect(timeline).toContain(piece);
    expect(await w.page.locator('.summary').textContent()).toContain('Attempt1 of 3');
    expect(w.errors).toEqual([]);

    // The same run at a desktop and a phone width.
    await screenshots(w.page, 'run-view');
    expect(w.errors).toEqual([]);
  });

  it('shows tool calls and their results in the timeline, with the agent and role that said them', async () => {
    fake.script('#ui-tools', [
      callTools([{ id: 'c-paris', name: 'weather', arguments: { city: 'Paris' } }, { id: 'c-bad', name: 'weather', arguments: { city: 42 } }]),
      says('Paris is at 21 °C.'),
    ]);
    const run = (await acme.submit('ui-tools', 'Weather in Paris? #ui-tools', { agent: 'ui-forecaster' })).body;
    const w = await loggedIn(acme.key, `/ui/runs/${run.id}`);
    await untilText(statusBadge(w.page), 'succeeded');
    await untilText(answer(w.page), 'Paris is at 21 °C.');
    await untilText(w.page.locator('.stream-state'), 'Stream complete.');

    const lines = w.page.locator('ol.timeline li');
    const tools = w.page.locator('ol.timeline li.ev-tool-call, ol.timeline li.ev-tool-result');
    await waitFor(async () => (await tools.count()) === 4, 10_000, 'two calls and two results');
    expect(await tools.locator('.ev-type').allTextContents()).toEqual(['tool-call', 'tool-result', 'tool-call', 'tool-result']);
    expect(await tools.locator('.ev-who').allTextContents()).toEqual([
      'ui-forecaster · assistant', 'ui-forecaster · tool', 'ui-forecaster · assistant', 'ui-forecaster · tool',
    ]);
    const text = await tools.locator('.ev-text').allTextContents();
    expect(text[0]).toContain('weather({"city":"Paris"}) · call c-paris');
    expect(text[1]).toContain('weather → {"city":"Paris","tempC":21} · call c-paris');
    expect(text[3]).toContain('weather failed: the arguments do not match the parameters of weather');
    // The refused call is marked as such; the answer's text line says who wrote it.
    expect(await w.page.locator('ol.timeline li.ev-failed .ev-text').textContent()).toContain('call c-bad');
    expect(await lines.filter({ hasText: 'of answer' }).locator('.ev-who').allTextContents()).toEqual(['ui-forecaster · assistant']);
    // Its two model calls and their tokens as the API counted them; no cost, since this API has no price table.
    const usage = (await acme.get(`/runs/${run.id}/usage`)).body;
    expect(usage.total.modelCalls).toBe(2);
    expect(usage).not.toHaveProperty('costUsd');
    const shown = await untilText(w.page.locator('dl.usage'), (t) => t.includes('Model calls2'), 'the usage');
    expect(shown.replace(/[^\d]/g, '')).toBe(`2${usage.total.inputTokens}${usage.total.outputTokens}${usage.total.totalTokens}`);
    expect(shown).toContain('Modelfake-model');
    expect(shown).not.toContain('Cost');
    await untilText(w.page.locator('dl.summary'), (t) => /Duration\d/.test(t), 'the duration');
    expect(w.errors).toEqual([]);
    await screenshots(w.page, 'run-view-tools');
    expect(w.errors).toEqual([]);
  });

  it('resumes a dropped event stream where it broke: nothing lost, nothing twice', async () => {
    // The page is served through a proxy that cuts the first event stream after three events,
    // as a flaky network or a load balancer would; the page reconnects with Last-Event-ID.
    let streams = 0;
    const proxy = await startSseProxy(api.url, { cutAfterEvents: () => (streams++ === 0 ? 3 : undefined) });
    const run = (await acme.submit('ui-resume', 'one two three', { agent: 'ui-talk', metadata: { gated: true } })).body;
    const w = await openPage(browser);
    pages.push(w);
    await w.page.goto(`${proxy.url}/ui/runs/${run.id}#key=${encodeURIComponent(acme.key)}`);
    await untilText(answer(w.page), 'one');
    expect(proxy.cuts).toBe(1);
    release(run.id);
    release(run.id);
    await untilText(answer(w.page), 'one two three');
    await untilText(statusBadge(w.page), 'succeeded');
    await untilText(w.page.locator('.stream-state'), 'Stream complete.');
    const types = await w.page.locator('ol.timeline .ev-type').allTextContents();
    expect(types.filter((t) => t === 'attempt')).toHaveLength(1);
    expect(types.filter((t) => t === 'end')).toHaveLength(1);
    const ids = await w.page.locator('ol.timeline .ev-id').allTextContents();
    expect(new Set(ids).size).toBe(ids.length);
    expect(streams).toBe(2);
    // The browser notes the cut connection itself; the page adds nothing of its own.
    expect(w.errors.filter((e) => !/net::ERR_/.test(e))).toEqual([]);
  });

  it('filters the runs list by status, session, agent and runtime', async () => {
    const a = (await acme.submit('ui-filter-a', 'one', { agent: 'ui-talk' })).body;
    const b = (await acme.submit('ui-filter-b', 'two', { agent: 'echo' })).body;
    await acme.waitStatus(a.id, ['succeeded']);
    await acme.waitStatus(b.id, ['succeeded']);
    const w = await loggedIn(acme.key);
    const rows = w.page.locator('table.runs tbody tr');
    await w.page.getByRole('link', { name: b.id }).waitFor();

    await w.page.getByLabel('Agent').fill('ui-talk');
    await w.page.getByLabel('Session').fill('ui-filter-a');
    await w.page.getByRole('button', { name: 'Apply filters' }).click();
    await waitFor(async () => (await rows.count()) === 1, 10_000, 'one row');
    expect(await rows.first().textContent()).toContain(a.id);
    expect(new URL(w.page.url()).search).toBe('?sessionId=ui-filter-a&agent=ui-talk');

    await w.page.getByRole('button', { name: 'Clear' }).click();
    await w.page.getByLabel('Runtime').fill(h.runtime);
    await w.page.getByLabel('Status').selectOption('succeeded');
    await w.page.getByLabel('Agent').fill('echo');
    await w.page.getByRole('button', { name: 'Apply filters' }).click();
    await waitFor(async () => (await rows.count()) === 1 && (await rows.first().textContent())!.includes(b.id), 10_000, 'the echo run');

    await w.page.getByLabel('Runtime').fill('no:such');
    await w.page.getByRole('button', { name: 'Apply filters' }).click();
    await untilText(w.page.getByRole('alert'), (t) => t.startsWith('Runtime: up to 64'));
    expect(w.errors).toEqual([]);
  });

  it('opens a shared link to a filtered runs list with its filter applied', async () => {
    const failed = (await acme.submit('ui-link-failed', 'fail me', { agent: 'fx-flaky', metadata: { plan: ['permanent'] } })).body;
    const ok = (await acme.submit('ui-link-ok', 'fine', { agent: 'echo' })).body;
    await acme.waitStatus(failed.id, ['failed']);
    await acme.waitStatus(ok.id, ['succeeded']);
    const w = await loggedIn(acme.key, '/ui/runs?status=failed');
    expect(w.page.url()).toBe(ui('/runs?status=failed'));
    await w.page.getByRole('link', { name: failed.id }).waitFor();
    expect(await w.page.getByLabel('Status').inputValue()).toBe('failed');
    const badges = await w.page.locator('table.runs tbody tr .badge').allTextContents();
    expect(badges.length).toBeGreaterThan(0);
    expect(new Set(badges)).toEqual(new Set(['failed']));
    expect(await w.page.getByRole('link', { name: ok.id }).count()).toBe(0);
    // With the other filters of the link too, and from a fresh tab (the key from the link's fragment).
    const w2 = await loggedIn(acme.key, `/ui/runs?status=failed&sessionId=ui-link-failed&agent=fx-flaky&runtime=${h.runtime}`);
    await w2.page.getByRole('link', { name: failed.id }).waitFor();
    expect(await w2.page.locator('table.runs tbody tr').count()).toBe(1);
    expect(await w2.page.getByLabel('Agent').inputValue()).toBe('fx-flaky');
    expect([...w.errors, ...w2.errors]).toEqual([]);
  });

  it('cancels a running run; its partial answer shows as incomplete in the session', async () => {
    const run = (await acme.submit('ui-cancel', 'first second third', { agent: 'ui-talk', metadata: { gated: true } })).body;
    const w = await loggedIn(acme.key, `/ui/runs/${run.id}`);
    await untilText(answer(w.page), 'first');
    await w.page.getByRole('button', { name: 'Cancel run…' }).click();
    await w.page.getByRole('button', { name: 'Yes, cancel the run' }).click();
    await untilText(statusBadge(w.page), 'cancelled');
    expect((await acme.get(`/runs/${run.id}`)).body).toMatchObject({ status: 'cancelled', result: { answer: 'first', finishReason: 'cancelled' } });
    await untilText(w.page.locator('.stream-state'), 'Stream complete.');
    expect(await w.page.getByRole('button', { name: 'Cancel run…' }).count()).toBe(0);

    await w.page.getByRole('link', { name: 'ui-cancel' }).click();
    const assistant = w.page.locator('.msg-assistant');
    await untilText(assistant, (t) => t.includes('incomplete') && t.includes('first'), 'the incomplete answer');
    await untilText(w.page.locator('.msg-user'), (t) => t.includes('first second third'), 'the user message');
    expect(w.errors).toEqual([]);
  });

  it('resolves a blocked step with an admin key; a client key sees no resolve form', async () => {
    // A worker dies inside a non-idempotent tool: the run blocks (see engine-block.test.ts).
    const rt = `${h.runtime}-b`;
    const child = await h.spawn('worker', { agents: [FIXTURE], env: { FX_TAG: 'A', RUNTIME: rt } });
    const run = (await acme.submit('ui-block', 'charge me', { agent: 'fx-charge', runtime: rt })).body;
    await waitFor(() => fx(h, run.id, 'reached'), 20_000, 'worker A inside the tool');
    await h.startWorker({ agents: [charge], env: { RUNTIME: rt } });
    await child.kill('SIGKILL');
    await fxSet(h, run.id, 'go');
    await acme.waitStatus(run.id, ['blocked'], 20_000);

    const asClient = await loggedIn(await h.key('acme', 'client'), `/ui/runs/${run.id}`);
    await untilText(asClient.page.locator('#blocked-h'), 'Blocked on step tool:charge:1');
    await untilText(asClient.page.locator('table.steps tbody tr'), (t) => t.includes('tool:charge:1') && t.includes('started, no result'), 'the started step');
    expect(await asClient.page.getByRole('button', { name: 'Resolve step' }).count()).toBe(0);
    expect(await asClient.page.locator('#blocked-h').locator('..').textContent()).toContain('An admin key of this scope can resolve it.');
    expect(asClient.errors).toEqual([]);

    const w = await loggedIn(acme.key, `/ui/runs/${run.id}`);
    await w.page.getByLabel('Step result (JSON)').fill('not json');
    await w.page.getByRole('button', { name: 'Resolve step' }).click();
    await untilText(w.page.getByRole('alert'), (t) => t.startsWith('Enter the value as JSON'), 'the JSON hint');
    await w.page.getByLabel('Step result (JSON)').fill('{"receipt":"manual","amount":5}');
    await w.page.getByRole('button', { name: 'Resolve step' }).click();
    await untilText(statusBadge(w.page), 'succeeded');
    await untilText(answer(w.page), 'charged {"receipt":"manual","amount":5}');
    await untilText(w.page.locator('table.steps tbody tr'), (t) => t.includes('tool:charge:1') && t.includes('done'), 'the resolved step');
    expect(await fx(h, run.id, 'charge')).toBe('1');
    expect(await w.page.locator('ol.timeline').textContent()).toContain('step tool:charge:1 resolved (value)');
    expect(w.errors).toEqual([]);
  });

  it('drains and resumes a runtime as admin; a client key sees no admin controls', async () => {
    const w = await loggedIn(acme.key, '/ui/runtimes');
    const card = w.page.locator(`article[data-runtime="${h.runtime}"]`);
    await card.getByRole('button', { name: `Drain ${h.runtime}` }).waitFor();
    expect(await card.textContent()).toContain('ui-talk');
    await untilText(card.locator('.counts'), (t) => t.includes('succeeded'), 'the counts');
    await card.getByRole('button', { name: `Drain ${h.runtime}` }).click();
    await untilText(card.getByRole('status'), 'Draining; 0 queued runs cancelled.');
    expect((await acme.get(`/runtimes/${h.runtime}/stats`)).body.draining).toBe(true);
    await card.getByRole('button', { name: `Resume ${h.runtime}` }).click();
    await untilText(card.getByRole('status'), 'Resumed; 0 parked runs admitted.');
    expect((await acme.get(`/runtimes/${h.runtime}/stats`)).body.draining).toBe(false);
    await card.getByRole('button', { name: `Drain ${h.runtime}` }).waitFor();
    expect(w.errors).toEqual([]);

    const asClient = await loggedIn(await h.key('acme', 'client'), '/ui/runtimes');
    await asClient.page.getByRole('heading', { name: h.runtime }).first().waitFor();
    expect(await asClient.page.getByRole('button', { name: /^(Drain|Resume) / }).count()).toBe(0);
    expect(await asClient.page.locator('.counts').count()).toBe(0);
    expect(asClient.errors).toEqual([]);
  });

  it("shows another scope's run as not found", async () => {
    const run = (await acme.submit('ui-private', 'mine', { agent: 'echo' })).body;
    await acme.waitStatus(run.id, ['succeeded']);
    const w = await loggedIn(await h.key('globex', 'admin'), `/ui/runs/${run.id}`);
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Run not found');
    expect(await w.page.locator('main').textContent()).toContain(`Scope globex has no run ${run.id}`);
    expect(await w.page.locator('main').textContent()).not.toContain('mine');
    // The only console lines are the browser's own note of the API's 404.
    expect(w.errors.filter((e) => !/status of 404/.test(e))).toEqual([]);
  });

  it('shows a retry with its countdown and reason, and a list of runs in every state', async () => {
    const retrying = (await acme.submit('ui-retry', 'retry me', { agent: 'fx-flaky', metadata: { plan: ['retry-after:600000', 'ok'] } })).body;
    const failed = (await acme.submit('ui-fail', 'fail me', { agent: 'fx-flaky', metadata: { plan: ['permanent'] } })).body;
    const running = (await acme.submit('ui-running', 'still going on', { agent: 'ui-talk', metadata: { gated: true } })).body;
    await acme.waitStatus(retrying.id, ['retrying']);
    await acme.waitStatus(failed.id, ['failed']);
    await acme.waitStatus(running.id, ['running']);

    const w = await loggedIn(acme.key, `/ui/runs/${retrying.id}`);
    await untilText(w.page.locator('#error-h'), 'Why it retries');
    expect(await w.page.locator('#error-h').locator('..').textContent()).toContain('RETRY_AFTER slow down (execution 1)');
    await untilText(w.page.locator('.summary'), (t) => /Next attemptin (9|10) min/.test(t), 'the countdown');
    await untilText(w.page.locator('.summary'), (t) => t.includes('Attempt1 of 3'), 'the attempt');
    // The streamed text of the attempt, the inference that streamed it, and the memoized steps.
    await untilText(answer(w.page), 'draft');
    await untilText(w.page.locator('table.steps'), (t) => ['step:prepare:1', 'tool:lookup:1', 'tool:lookup:2', 'infer:draft:1'].every((k) => t.includes(k)), 'the steps');
    await screenshots(w.page, 'run-view-retrying');

    await w.page.getByRole('link', { name: 'Runs', exact: true }).click();
    for (const id of [retrying.id, failed.id, running.id]) await w.page.getByRole('link', { name: id }).waitFor();
    await screenshots(w.page, 'runs-list');
    expect(w.errors).toEqual([]);
    release(running.id);
    release(running.id);
    await acme.waitStatus(running.id, ['succeeded']);
  });

  it('renders pending waits as forms and resumes them through the real resume route', async () => {
    // Two approvals and an input at once: each card answers its own wait, and the run goes on.
    const run = (await acme.submit('ui-waits', 'wait for me', { agent: 'ui-waits' })).body;
    await acme.waitStatus(run.id, ['waiting']);
    const w = await openPage(browser);
    pages.push(w);
    const posted: { url: string; body: unknown }[] = [];
    w.page.on('request', (r) => {
      if (r.method() === 'POST' && r.url().includes('/waits/')) posted.push({ url: r.url(), body: r.postDataJSON() });
    });
    await w.page.goto(`${ui(`/runs/${run.id}`)}#key=${encodeURIComponent(acme.key)}`);
    await w.page.getByRole('heading', { name: 'Waiting for input' }).waitFor();
    const card = (key: string) => w.page.locator('article.wait', { hasText: key });
    await card('wait:details:1').waitFor();
    await screenshots(w.page, 'run-view-waiting');

    await card('wait:ship:1').getByRole('button', { name: 'Approve' }).click();
    await waitFor(() => posted.length === 1, 10_000, 'the approval');
    expect(posted[0]).toEqual({ url: api.url + `/v1/scopes/acme/runs/${run.id}/waits/wait%3Aship%3A1`, body: { value: { approved: true } } });
    await card('wait:ship:1').waitFor({ state: 'detached' });
    await card('wait:notify:1').getByLabel('Reason (sent with a decline)').fill('not today');
    await card('wait:notify:1').getByRole('button', { name: 'Decline' }).click();
    await waitFor(() => posted.length === 2, 10_000, 'the decline');
    expect(posted[1].body).toEqual({ value: { approved: false, reason: 'not today' } });
    await card('wait:notify:1').waitFor({ state: 'detached' });

    // Required fields are checked before anything is sent.
    const details = card('wait:details:1');
    await details.getByRole('button', { name: 'Send' }).click();
    await untilText(details.locator('.schema-form .error').first(), 'Required.');
    expect(posted).toHaveLength(2);
    await details.getByLabel('How many').fill('2.5');
    await details.getByLabel('Colour').selectOption('green');
    await details.getByLabel('Urgent').check();
    await details.getByRole('button', { name: 'Send' }).click();
    await untilText(details.locator('.schema-form .error').first(), 'Enter a whole number.');
    await details.getByLabel('How many').fill('3');
    await details.getByLabel('Note').fill('by noon');
    await details.getByRole('button', { name: 'Send' }).click();
    await waitFor(() => posted.length === 3, 10_000, 'the input');
    expect(posted[2]).toEqual({
      url: api.url + `/v1/scopes/acme/runs/${run.id}/waits/wait%3Adetails%3A1`,
      body: { value: { count: 3, color: 'green', urgent: true, note: 'by noon' } },
    });
    await untilText(statusBadge(w.page), 'succeeded');
    expect((await acme.get(`/runs/${run.id}`)).body.result.answer).toBe('shipped to prod; notify declined: not today; {"count":3,"color":"green","urgent":true,"note":"by noon"}');
    expect(w.errors).toEqual([]);

  });

  it('filters the runs list by the statuses of waits and schedules', async () => {
    const waitingRun = (await acme.submit('ui-filter-wait', 'wait', { agent: 'ui-waits' })).body;
    const scheduledRun = (await acme.submit('ui-filter-later', 'later', { delayMs: 600_000 })).body;
    await acme.waitStatus(waitingRun.id, ['waiting']);
    const w = await loggedIn(acme.key);
    const rows = w.page.locator('table.runs tbody tr');
    const options = await w.page.getByLabel('Status').locator('option').allTextContents();
    for (const s of ['scheduled', 'waiting', 'expired']) expect(options).toContain(s);
    for (const [status, run] of [['waiting', waitingRun], ['scheduled', scheduledRun]] as const) {
      await w.page.getByLabel('Status').selectOption(status);
      await w.page.getByRole('button', { name: 'Apply filters' }).click();
      await waitFor(async () => (await rows.count()) === 1 && (await rows.first().textContent())!.includes(run.id), 10_000, `the ${status} run`);
      expect(await rows.first().locator('.badge').textContent()).toBe(status);
    }
    for (const r of [waitingRun, scheduledRun]) await acme.post(`/runs/${r.id}/cancel`, {});
    expect(w.errors).toEqual([]);
  });
});

/**
 * Full-page screenshots at a desktop and a phone width (test-artifacts/ui/<name>-<width>.png),
 * each checked for sideways scrolling and unlabelled controls first, and the page for
 * controls the keyboard cannot reach.
 */
async function screenshots(page: Page, name: string): Promise<void> {
  await page.setViewportSize({ width: 1280, height: 900 });
  await expectKeyboardReachable(page, name);
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 900 });
    await expectNoSideways(page, `${name} at ${width}`);
    await expectLabelledControls(page);
    await page.screenshot({ path: artifactPath(`${name}-${width}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: 1280, height: 900 });
}

/** Nothing on the page is wider than the window (no sideways scrolling to read it). */
async function expectNoSideways(page: Page, what: string): Promise<void> {
  const { scroll, width } = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, width: innerWidth }));
  expect(scroll, what).toBeLessThanOrEqual(width);
}

/**
 * Tab, from the top of the page, reaches every visible, enabled link and form control, in
 * some order: none is left out of the focus order (a div with a click handler, a negative
 * tabindex).
 */
async function expectKeyboardReachable(page: Page, what: string): Promise<void> {
  const count = await page.evaluate(() => {
    const controls = [...document.querySelectorAll('a[href], button, input, select, textarea')]
      .filter((el) => !(el as HTMLInputElement).disabled && el.getClientRects().length > 0);
    controls.forEach((el, i) => el.setAttribute('data-kb', String(i)));
    (document.activeElement as HTMLElement | null)?.blur();
    return controls.length;
  });
  const reached = new Set<string>();
  for (let i = 0; i < count + 10 && reached.size < count; i++) {
    await page.keyboard.press('Tab');
    const at = await page.evaluate(() => document.activeElement?.getAttribute('data-kb') ?? null);
    if (at !== null) reached.add(at);
  }
  const missed = await page.evaluate((seen) =>
    [...document.querySelectorAll('[data-kb]')].filter((el) => !seen.includes(el.getAttribute('data-kb')!)).map((el) => el.outerHTML.slice(0, 120)),
  [...reached]);
  await page.evaluate(() => document.querySelectorAll('[data-kb]').forEach((el) => el.removeAttribute('data-kb')));
  expect(missed, `controls of ${what} the keyboard does not reach`).toEqual([]);
}

/** Every input, select, textarea and button has a name a screen reader can announce. */
async function expectLabelledControls(page: Page): Promise<void> {
  const unnamed = await page.evaluate(() =>
    [...document.querySelectorAll('input, select, textarea, button')]
      .filter((el) => {
        const e = el as HTMLInputElement;
        if (e.labels && e.labels.length > 0) return false;
        if (e.getAttribute('aria-label') || e.getAttribute('aria-labelledby')) return false;
        return el.tagName !== 'BUTTON' || !el.textContent?.trim();
      })
      .map((el) => el.outerHTML.slice(0, 120)),
  );
  expect(unnamed).toEqual([]);
}
