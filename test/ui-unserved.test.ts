import type { BrowserContext } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, type RunContext } from '../src/lib/sdk/agent.ts';
import { ensureUiBuilt, launchBrowser, openPage, untilText, type WatchedPage } from './helpers/browser.ts';
import { skipWithout } from './helpers/programs.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

/**
 * The run inspector, in Debian's Chromium, on a run whose agent no live worker of its runtime
 * serves: the run's view says so while the run waits, the runs list marks it (and not a run
 * that merely waits for a free slot), and the runtimes view lists the agent for an admin key.
 * Once a worker that serves the agent starts, the run succeeds and the note is gone.
 */

/** Holds its run until the test lets it go, so the worker's one slot stays taken. */
const holds = new Map<string, () => void>();
const hold = defineAgent({
  name: 'hold',
  async run(ctx: RunContext) {
    await new Promise<void>((resolve) => {
      holds.set(ctx.runId, resolve);
      ctx.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    return 'held';
  },
});

const ghost = defineAgent({ name: 'ghost', run: async (ctx) => `boo: ${ctx.input.content}` });

let h: Harness;
let browser: BrowserContext;
const pages: WatchedPage[] = [];

beforeAll(async () => {
  ensureUiBuilt();
  h = await useHarness();
  browser = await launchBrowser();
});

describe.skipIf(noChromium)('the run inspector on a run whose agent no worker serves', () => {
  it('says so in the run view, the runs list and the runtimes view, until a worker serves the agent', async () => {
    const api = await h.startApi();
    // One slot: while `hold` runs, an echo run waits for the slot, not for a worker of its agent.
    await h.startWorker({ agents: [hold], env: { WORKER_CONCURRENCY: '1' } });
    const client = await h.client(api.url, 'acme', 'client');
    const admin = await h.client(api.url, 'acme', 'admin');

    const held = (await client.submit('s-hold', 'wait', { agent: 'hold' })).body.id;
    await waitFor(() => holds.has(held), 20_000, 'the hold run to start');
    const slotted = (await client.submit('s-echo', 'later', { agent: 'echo' })).body.id;
    // An agent the runtime never offered: queued only when the submit says it will come.
    const r = await client.submit('s-ghost', 'hello', { agent: 'ghost', awaitAgent: true });
    expect(r.status).toBe(202);
    expect(r.body.warnings).toEqual([expect.stringContaining('"ghost"')]);
    const run = r.body.id as string;
    expect((await client.get(`/runs/${slotted}`)).body.status).toBe('queued');

    // The run's view, with a client key (any key may read the runtimes' agents).
    const view = await open(api.url, client.key, `/ui/runs/${run}`);
    await untilText(view.page.locator('h1 .badge'), 'queued');
    const note = view.page.locator('.unserved');
    await untilText(
      note,
      `No worker for agent ghost on runtime ${h.runtime}: the run waits for one (it fails UNKNOWN_AGENT after AGENT_GRACE_MS).`,
    );

    // The echo run waiting for the slot has a worker for its agent: no note on its view.
    const slottedView = await open(api.url, client.key, `/ui/runs/${slotted}`);
    await untilText(slottedView.page.locator('h1 .badge'), 'queued');
    await untilText(slottedView.page.locator('dl.summary'), (t) => t.includes('Agentecho'), 'the summary');
    expect(await slottedView.page.locator('.unserved').count()).toBe(0);

    // The runs list marks the ghost run only: both are queued, read in the same refresh.
    const list = await open(api.url, client.key, '/ui/runs');
    const row = (id: string) => list.page.locator('tr', { has: list.page.getByRole('link', { name: id }) });
    await untilText(row(run).locator('td[data-label="Status"]'), 'queued no worker for agent ghost');
    expect(((await row(slotted).locator('td[data-label="Status"]').textContent()) ?? '').trim()).toBe('queued');
    expect(await list.page.locator('.unserved-mark').count()).toBe(1);

    // The runtimes view with an admin key lists the agent from the runtime's stats.
    const runtimes = await open(api.url, admin.key, '/ui/runtimes');
    const card = runtimes.page.locator(`article[data-runtime="${h.runtime}"]`);
    await untilText(card.locator('.unserved li'), (t) => /^no worker for agent ghost: 1 run waiting, oldest \d+(\.\d)? m?s$/.test(t), 'the unserved agent');
    // A client key sees no stats, so no such list.
    const clientRuntimes = await open(api.url, client.key, '/ui/runtimes');
    await untilText(clientRuntimes.page.locator(`article[data-runtime="${h.runtime}"] dd`).last(), (t) => t.includes('hold'), 'the agents');
    expect(await clientRuntimes.page.locator('.unserved').count()).toBe(0);

    // A worker that serves ghost: the run succeeds, and its view no longer has the note.
    await h.startWorker({ agents: [ghost] });
    expect((await client.waitStatus(run, ['succeeded', 'failed'])).status).toBe('succeeded');
    await untilText(view.page.locator('h1 .badge'), 'succeeded');
    await untilText(view.page.locator('pre.answer'), 'boo: hello');
    expect(await note.count()).toBe(0);
    // The list drops the mark; the runtimes view drops the agent.
    await untilText(row(run).locator('td[data-label="Status"]'), 'succeeded');
    await waitFor(async () => (await card.locator('.unserved').count()) === 0, 10_000, 'the runtimes view to drop ghost');

    holds.get(held)!();
    expect((await client.waitStatus(slotted, ['succeeded', 'failed'])).status).toBe('succeeded');
    for (const p of pages) expect(p.errors).toEqual([]);
    await api.close();
  });
});

/** A tab logged in with `key` through the link fragment, at `path`. */
async function open(base: string, key: string, path: string): Promise<WatchedPage> {
  const w = await openPage(browser);
  pages.push(w);
  await w.page.goto(`${base}${path}#key=${encodeURIComponent(key)}`);
  await w.page.getByRole('button', { name: 'Log out' }).waitFor();
  return w;
}
