import type { BrowserContext, Page } from 'playwright-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { artifactPath, ensureUiBuilt, launchBrowser, openLoggedIn, untilText, type WatchedPage } from './helpers/browser.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { skipWithout } from './helpers/programs.ts';

/**
 * The run inspector's bulk actions and schedules, in Debian's Chromium against a real API and
 * worker on a real Redis. An admin key selects runs and cancels or re-runs them (each refusal
 * named), and starts a cancel of every run the page's filter matches, which the page follows
 * to its end; the filters the API would refuse are refused on the page. No process but the
 * one this file starts when it means to advances bulk operations (BULK_POLL_MS=0 elsewhere),
 * so an operation stays running for as long as the test looks at it. The schedules page makes,
 * pauses, resumes and deletes a schedule. A client key sees neither the actions nor the form.
 */

/** A run with a non-idempotent step: re-running it is refused (RERUN_NON_IDEMPOTENT). */
const pay = defineAgent({
  name: 'ui-pay',
  async run(ctx) {
    const receipt = await ctx.tool('pay', { amount: 5 }, () => 'paid', { idempotent: false });
    return { answer: String(receipt) };
  },
});

const noChromium = skipWithout('chromium');

let h: Harness;
let api: ApiHandle;
let acme: ScopeClient;
let other: ScopeClient;
let browser: BrowserContext;
let pages: WatchedPage[] = [];
/** A runtime no worker serves: its runs stay queued. */
let idle: string;

beforeAll(async () => {
  ensureUiBuilt();
  h = await useHarness();
  idle = `${h.runtime}-idle`;
  api = await h.startApi({ BULK_POLL_MS: '0' });
  await h.startWorker({ agents: [pay], env: { BULK_POLL_MS: '0' } });
  acme = await h.client(api.url, 'acme', 'admin');
  other = await h.client(api.url, 'other', 'admin');
  browser = await launchBrowser();
});

afterEach(async () => {
  for (const p of pages) await p.page.close();
  pages = [];
});

/** A tab logged in with `key` at `path`, closed with the file's other tabs. */
async function loggedIn(key: string, path: string) {
  const w = await openLoggedIn(browser, api.url, key, path);
  pages.push(w);
  return w;
}

/** Submits a run that stays queued: its runtime has no worker. */
async function queued(c: ScopeClient, sessionId: string, agent: string): Promise<string> {
  const res = await c.submit(sessionId, 'waits', { agent, runtime: idle });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  return res.body.id as string;
}

async function ended(c: ScopeClient, sessionId: string, agent: string): Promise<string> {
  const res = await c.submit(sessionId, 'done soon', { agent });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  await c.waitStatus(res.body.id, ['succeeded']);
  return res.body.id as string;
}

const statusOf = async (c: ScopeClient, runId: string) => (await c.get(`/runs/${runId}`)).body.status as string;
const statuses = (c: ScopeClient, ids: string[]) => Promise.all(ids.map((id) => statusOf(c, id)));
const select = (page: Page, runId: string) => page.getByRole('checkbox', { name: `Select run ${runId}` });
const button = (page: Page, name: string) => page.getByRole('button', { name, exact: true });

/**
 * Checks a run's box while the page is busy (an operation just started above the list, the list
 * polled): a render can land between Playwright's click and its check of the box, which then
 * throws though the page ends up as asked. Clicked again while the box does not show checked,
 * three times at most; a box the page never keeps checked still fails here.
 */
async function checkWhileBusy(page: Page, runId: string): Promise<void> {
  const box = select(page, runId);
  for (let i = 0; i < 3 && !(await box.isChecked()); i++) await box.check().catch(() => {});
  expect(await box.isChecked()).toBe(true);
}

/** A full-page screenshot at 1280 px and at 390 px, and at 390 px nothing may scroll sideways. */
async function screenshots(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: artifactPath(`${name}-desktop.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  const widths = await page.evaluate(() => {
    const root = document.documentElement;
    return { scroll: root.scrollWidth, client: root.clientWidth };
  });
  expect(widths.scroll, `${name} at 390 px: ${JSON.stringify(widths)}`).toBeLessThanOrEqual(widths.client);
  await page.screenshot({ path: artifactPath(`${name}-phone.png`), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
}

describe.skipIf(noChromium)('the runs page, for an admin key', () => {
  it('cancels and re-runs the selected runs, one call each, and names each refusal and its reason', async () => {
    const [q1, q2] = [await queued(acme, 'sel-1', 'stuck'), await queued(acme, 'sel-2', 'stuck')];
    const paid = await ended(acme, 'sel-3', 'ui-pay');
    const echoed = await ended(acme, 'sel-4', 'echo');

    const w = await loggedIn(acme.key, '/ui/runs');
    await select(w.page, q1).check();
    await select(w.page, q2).check();
    await untilText(w.page.locator('.run-actions-bar [role="status"]'), (t) => t.startsWith('2 of '), '2 selected');
    await button(w.page, 'Cancel selected').click();
    await untilText(w.page.locator('.run-results p'), 'Cancelled 2 of 2 selected runs.');
    expect(await statuses(acme, [q1, q2])).toEqual(['cancelled', 'cancelled']);

    // A re-run across a completed non-idempotent step is refused, and says which step.
    await select(w.page, paid).check();
    await select(w.page, echoed).check();
    await button(w.page, 'Re-run selected').click();
    await untilText(w.page.locator('.run-results p'), 'Re-ran 1 of 2 selected runs; 1 refused:');
    const refusal = await untilText(w.page.locator('.run-results .refused li'), (t) => t.startsWith(`${paid}: `), 'the refusal');
    expect(refusal).toContain('(RERUN_NON_IDEMPOTENT)');
    expect(refusal).toContain('tool:pay:1');
    expect((await acme.get(`/runs/${echoed}`)).body.reruns).toHaveLength(1);
    expect((await acme.get(`/runs/${paid}`)).body.reruns ?? []).toEqual([]);
    // The refused run stays selected; the re-run one does not.
    expect(await select(w.page, paid).isChecked()).toBe(true);
    expect(await select(w.page, echoed).isChecked()).toBe(false);

    // A cancel of runs that had ended changes nothing, and says so for each.
    await select(w.page, q1).check();
    await button(w.page, 'Cancel selected').click();
    await untilText(w.page.locator('.run-results p'), 'Cancelled 0 of 2 selected runs; 2 refused:');
    const lines = await w.page.locator('.run-results .refused li').allTextContents();
    expect(lines.map((l) => l.replace(/\s+/g, ' ')).sort()).toEqual(
      [`${paid}: it had ended (succeeded): nothing to cancel`, `${q1}: it was cancelled already`].sort(),
    );
    expect(await statusOf(acme, paid)).toBe('succeeded');

    // Select all on this page, and clear it.
    const all = w.page.getByLabel('Select all on this page');
    await all.check();
    const rows = await w.page.locator('table.runs tbody tr').count();
    await untilText(w.page.locator('.run-actions-bar [role="status"]'), `${rows} of ${rows} selected`);
    await all.uncheck();
    await untilText(w.page.locator('.run-actions-bar [role="status"]'), `0 of ${rows} selected`);

    expect(w.responses.filter((r) => r.status >= 400)).toEqual([
      { method: 'POST', url: `${api.url}/v1/scopes/acme/runs/${paid}/rerun`, status: 409 },
    ]);
    expect(w.errors.filter((e) => !/status of 409/.test(e))).toEqual([]);
  });

  it('refuses on the page a bulk action the API would refuse: no filter, a cancel of ended runs, a re-run of runs not ended', async () => {
    const w = await loggedIn(acme.key, '/ui/runs');
    const refusal = w.page.locator('.bulk-refusal');
    await button(w.page, 'Cancel all matching this filter').click();
    await untilText(refusal, (t) => t.startsWith('Filter the runs first'), 'the no-filter refusal');
    await button(w.page, 'Re-run all matching this filter').click();
    await untilText(refusal, (t) => t.startsWith('Filter the runs first'), 'the no-filter refusal');

    await w.page.goto(`${api.url}/ui/runs?status=succeeded`);
    await button(w.page, 'Cancel all matching this filter').click();
    await untilText(refusal, 'Runs that are succeeded have ended: there is nothing to cancel. Filter by a status that has not ended, or by none.');
    await w.page.goto(`${api.url}/ui/runs?status=queued&agent=stuck`);
    await button(w.page, 'Re-run all matching this filter').click();
    await untilText(refusal, 'A re-run acts on ended runs (succeeded, failed, cancelled, expired); runs that are queued have not ended.');
    expect(await w.page.getByRole('alertdialog').count()).toBe(0);
    expect(w.responses.filter((r) => r.method === 'POST')).toEqual([]);
    expect(w.errors).toEqual([]);
  });

  it('stops a running operation from another tab that follows it from the list; the tab that started it sees it stop', async () => {
    const held = [await queued(acme, 'stop-1', 'halt'), await queued(acme, 'stop-2', 'halt')];
    const w = await loggedIn(acme.key, '/ui/runs?agent=halt');
    await select(w.page, held[0]).waitFor();
    await button(w.page, 'Cancel all matching this filter').click();
    await untilText(w.page.locator('#confirm-q'), (t) => t.startsWith('Cancel every run matching agent halt, created before '), 'the question');
    await button(w.page, 'Yes, cancel all matching').click();
    const progress = w.page.locator('section.operation');
    await untilText(progress.locator('h2'), 'Cancel all matching: running');
    const opId = (await progress.getAttribute('data-operation'))!;
    // Another tab follows it from the list of recent operations, and stops it.
    const second = await loggedIn(acme.key, '/ui/runs');
    await second.page.getByRole('button', { name: `Follow operation ${opId}` }).click();
    const followed = second.page.locator('section.operation');
    await untilText(followed.locator('h2'), 'Cancel all matching: running');
    expect(await followed.getAttribute('data-operation')).toBe(opId);
    await button(second.page, 'Stop this operation').click();
    await untilText(followed.locator('h2'), 'Cancel all matching: cancelled');
    await untilText(followed.locator('.note'), 'Stopped: no batch starts after this; what was done stays done.');
    expect(await button(second.page, 'Stop this operation').count()).toBe(0);
    // The tab that started it sees it stopped at its next read.
    await untilText(progress.locator('h2'), 'Cancel all matching: cancelled');
    expect(await button(w.page, 'Stop this operation').count()).toBe(0);
    const op = (await acme.get(`/operations/${opId}`)).body;
    expect(op).toMatchObject({ kind: 'cancel', status: 'cancelled', filter: { agent: 'halt' } });
    // No process advanced it before it was stopped: its runs are as they were.
    expect(await statuses(acme, held)).toEqual(['queued', 'queued']);
    await untilText(w.page.locator(`table.operations tr[data-operation="${opId}"] [data-label="Status"]`), 'cancelled');
    expect([...w.errors, ...second.errors]).toEqual([]);
  });

  it('cancels every run matching the filter in a background operation it follows to the end; other runs stay as they were', async () => {
    const matching = [await queued(acme, 'bulk-1', 'stuck'), await queued(acme, 'bulk-2', 'stuck'), await queued(acme, 'bulk-3', 'stuck')];
    // Another agent's queued runs, and the same agent's in another scope: not in the filter.
    const otherAgent = [await queued(acme, 'keep-1', 'keep'), await queued(acme, 'keep-2', 'keep')];
    const otherScope = [await queued(other, 'bulk-1', 'stuck'), await queued(other, 'bulk-2', 'stuck')];

    const w = await loggedIn(acme.key, '/ui/runs?status=queued&agent=stuck');
    for (const id of matching) await select(w.page, id).waitFor();
    await button(w.page, 'Cancel all matching this filter').click();
    const question = w.page.locator('#confirm-q');
    await untilText(question, (t) => t.startsWith('Cancel every run matching status queued, agent stuck, created before '), 'the question');
    await untilText(w.page.locator('#confirm-more'), (t) => t.startsWith('This starts a background operation'), 'what it does');
    // Submitted after the question was asked: created after its createdBefore, so not touched.
    const later = await queued(acme, 'bulk-4', 'stuck');
    await button(w.page, 'Yes, cancel all matching').click();
    const progress = w.page.locator('section.operation');
    await untilText(progress.locator('h2'), 'Cancel all matching: running');
    const opId = (await progress.getAttribute('data-operation'))!;
    await checkWhileBusy(w.page, matching[0]);
    await screenshots(w.page, 'operations-runs-running');

    // A process that advances operations comes up: the page follows the operation to its end.
    await h.startWorker({ env: { RUNTIME: `${h.runtime}-ops` } });
    await untilText(progress.locator('h2'), 'Cancel all matching: done');
    await untilText(progress.locator('[data-count="matched"]'), '3');
    await untilText(progress.locator('[data-count="done"]'), '3');
    await untilText(progress.locator('[data-count="failed"]'), '0');
    expect(await button(w.page, 'Stop this operation').count()).toBe(0);
    const op = (await acme.get(`/operations/${opId}`)).body;
    expect(op).toMatchObject({ kind: 'cancel', status: 'done', matched: 3, done: 3, failed: 0, filter: { status: ['queued'], agent: 'stuck' } });
    expect(Date.parse(op.filter.createdBefore)).toBeLessThan(Date.parse((await acme.get(`/runs/${later}`)).body.createdAt));

    expect(await statuses(acme, matching)).toEqual(['cancelled', 'cancelled', 'cancelled']);
    expect(await statusOf(acme, later)).toBe('queued');
    expect(await statuses(acme, otherAgent)).toEqual(['queued', 'queued']);
    expect(await statuses(other, otherScope)).toEqual(['queued', 'queued']);

    // The page read its runs again: of those matching, only the later one is left.
    await waitFor(async () => (await w.page.locator('table.runs tbody tr').count()) === 1, 10_000, 'one queued run on the page');
    expect(await select(w.page, later).count()).toBe(1);
    const row = w.page.locator(`table.operations tr[data-operation="${opId}"]`);
    await untilText(row.locator('[data-label="Status"]'), 'done');
    await untilText(row.locator('[data-label="Matched"]'), '3');
    await screenshots(w.page, 'operations-runs-done');
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
  });

  it('re-runs all matching ended runs, those with a non-idempotent step too when the reader allows it', async () => {
    // A process that advances operations (the test before started one too; this one stands alone).
    await h.startWorker({ env: { RUNTIME: `${h.runtime}-ops2` } });
    const paid = [await ended(acme, 'nid-1', 'ui-pay'), await ended(acme, 'nid-2', 'ui-pay')];
    const w = await loggedIn(acme.key, '/ui/runs?status=succeeded&sessionId=nid-2');
    await select(w.page, paid[1]).waitFor();

    // Not allowed: the run with the paid step counts as failed.
    await button(w.page, 'Re-run all matching this filter').click();
    await untilText(w.page.locator('#confirm-more'), (t) => t.includes('is not re-run, and counts as failed'), 'the warning');
    await button(w.page, 'Yes, re-run all matching').click();
    const progress = w.page.locator('section.operation');
    await untilText(progress.locator('h2'), 'Re-run all matching: done');
    await untilText(progress.locator('[data-count="failed"]'), '1');
    expect((await acme.get(`/runs/${paid[1]}`)).body.reruns ?? []).toEqual([]);

    // Allowed: it is re-run, once.
    await button(w.page, 'Re-run all matching this filter').click();
    await w.page.getByLabel('Also re-run runs whose non-idempotent steps would run again').check();
    await untilText(w.page.locator('#confirm-more'), (t) => t.includes('run again in every re-run that reaches them'), 'the warning');
    await button(w.page, 'Yes, re-run all matching').click();
    await untilText(progress.locator('[data-count="done"]'), '1');
    await untilText(progress.locator('h2'), 'Re-run all matching: done');
    const opId = (await progress.getAttribute('data-operation'))!;
    expect((await acme.get(`/operations/${opId}`)).body).toMatchObject({ kind: 'rerun', allowNonIdempotent: true, matched: 1, done: 1, failed: 0 });
    expect((await acme.get(`/runs/${paid[1]}`)).body.reruns).toHaveLength(1);
    expect((await acme.get(`/runs/${paid[0]}`)).body.reruns ?? []).toEqual([]);
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
  });
});

describe.skipIf(noChromium)('the schedules page', () => {
  it('makes a schedule with its five next fire times, shows the API’s field errors, pauses, resumes and deletes it', async () => {
    const w = await loggedIn(acme.key, '/ui/runs');
    await w.page.getByRole('link', { name: 'Schedules' }).click();
    expect(new URL(w.page.url()).pathname).toBe('/ui/schedules');
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Schedules');
    await untilText(w.page.locator('main .empty'), 'This scope has no schedules.');

    const field = (label: string) => w.page.getByLabel(label, { exact: true });
    await field('Cron expression').fill('61 * * * *');
    await field('Time zone').fill('Europe/Paris');
    await field('Session id').fill('nightly');
    await field('Input').fill('the nightly report');
    await button(w.page, 'Make schedule').click();
    const apiSays = (await acme.post('/schedules', { cron: '61 * * * *', run: { sessionId: 'nightly', input: { content: 'x' } } })).body.error;
    expect(apiSays.code).toBe('VALIDATION_FAILED');
    await untilText(w.page.locator('#sch-cron-error'), apiSays.details.find((d: { path: string }) => d.path === 'body.cron').message);
    await untilText(w.page.locator('.schedule-form [role="alert"] p'), (t) => t.startsWith('Nothing was made: ') && t.endsWith('(VALIDATION_FAILED); see cron'), 'the refusal');
    expect(await field('Cron expression').getAttribute('aria-invalid')).toBe('true');
    expect((await acme.get('/schedules')).body.schedules).toEqual([]);

    await field('Cron expression').fill('30 9 * * 1-5');
    await field('Missed ticks').selectOption('catchUpOne');
    await field('Agent').fill('digest');
    await field('Runtime').fill(idle);
    await w.page.getByLabel('A new session per tick').check();
    await button(w.page, 'Make schedule').click();
    await untilText(w.page.locator('.schedule-form .note'), (t) => t.startsWith('Made schedule '), 'the note');
    const [made] = (await acme.get('/schedules')).body.schedules;
    expect(made).toMatchObject({
      cron: '30 9 * * 1-5', timezone: 'Europe/Paris', missed: 'catchUpOne', status: 'active',
      run: { sessionPerTick: true, agent: 'digest', runtime: idle, input: { content: 'the nightly report' } },
    });
    expect(made.run.sessionId).toBeUndefined();

    const card = w.page.locator(`article.schedule[data-schedule="${made.id}"]`);
    await untilText(card.locator('h2'), '30 9 * * 1-5 active');
    const summary = (await card.locator('dl.summary').textContent())!.replace(/\s+/g, ' ');
    for (const part of ['Time zoneEurope/Paris', 'Agentdigest', 'Sessiona new session per tick', 'catch up one', 'Inputthe nightly report', 'Fired0 runs', 'Last ticknone yet']) {
      expect(summary).toContain(part);
    }
    const times = () => card.locator('ol.fire-times time').evaluateAll((ts) => ts.map((t) => t.getAttribute('datetime')));
    await waitFor(async () => (await times()).length === 5, 10_000, 'five fire times');
    expect(await times()).toEqual(made.nextFireTimes);
    // Shown in the schedule's zone: 09:30 in Paris, whatever the browser's.
    for (const t of await card.locator('ol.fire-times time').allTextContents()) expect(t).toMatch(/\b09:30$/);

    await card.getByRole('button', { name: 'Pause' }).click();
    await untilText(card.locator('h2'), '30 9 * * 1-5 paused');
    await untilText(card.locator('.fire-times-none'), 'None while paused: resumed, it fires from the first tick after then.');
    expect(await card.locator('ol.fire-times').count()).toBe(0);
    expect((await acme.get(`/schedules/${made.id}`)).body).toMatchObject({ status: 'paused', nextFireTimes: [] });

    await card.getByRole('button', { name: 'Resume' }).click();
    await untilText(card.locator('h2'), '30 9 * * 1-5 active');
    await waitFor(async () => (await times()).length === 5, 10_000, 'five fire times again');
    expect((await acme.get(`/schedules/${made.id}`)).body.status).toBe('active');
    await screenshots(w.page, 'schedules-admin');

    await card.getByRole('button', { name: 'Delete…' }).click();
    await untilText(card.locator('[role="alertdialog"] p'), 'Delete the schedule 30 9 * * 1-5? No tick fires after this; the runs it made stay.');
    await card.getByRole('button', { name: 'Keep it' }).click();
    expect((await acme.get(`/schedules/${made.id}`)).status).toBe(200);
    await card.getByRole('button', { name: 'Delete…' }).click();
    await card.getByRole('button', { name: 'Delete schedule' }).click();
    await waitFor(async () => (await card.count()) === 0, 10_000, 'the card to go');
    expect((await acme.get(`/schedules/${made.id}`)).status).toBe(404);

    expect(w.responses.filter((r) => r.status >= 400)).toEqual([{ method: 'POST', url: `${api.url}/v1/scopes/acme/schedules`, status: 400 }]);
    expect(w.errors.filter((e) => !/status of 400/.test(e))).toEqual([]);
  });
});

describe.skipIf(noChromium)('the schedules page, paged', () => {
  it('shows the first 20 schedules and reads the rest a page at a time with "More schedules"', async () => {
    const paged = await h.client(api.url, 'paged', 'admin');
    const ids: string[] = [];
    for (let i = 0; i < 25; i++) {
      const res = await paged.post('/schedules', { cron: `${i} 6 * * *`, run: { sessionId: 'morning', input: { content: `brief ${i}` }, runtime: idle } });
      expect(res.status).toBe(201);
      ids.push(res.body.id);
    }
    const w = await loggedIn(paged.key, '/ui/schedules');
    const shown = () => w.page.locator('article.schedule').evaluateAll((as) => as.map((a) => a.getAttribute('data-schedule')));
    await waitFor(async () => (await shown()).length === 20, 10_000, 'the first page');
    expect(await shown()).toEqual(ids.slice(0, 20));
    await button(w.page, 'More schedules').click();
    // The first page's cards stay while the second is read.
    let fewest = 20;
    await waitFor(async () => {
      const n = (await shown()).length;
      fewest = Math.min(fewest, n);
      return n === 25;
    }, 10_000, 'the second page');
    expect(fewest).toBe(20);
    expect(await shown()).toEqual(ids);
    expect(await button(w.page, 'More schedules').count()).toBe(0);
    // Every read of the listing was a page: never the whole list in one answer.
    const reads = w.responses.filter((r) => r.method === 'GET' && new URL(r.url).pathname === '/v1/scopes/paged/schedules');
    expect(reads.length).toBeGreaterThanOrEqual(2);
    for (const r of reads) expect(new URL(r.url).searchParams.get('limit'), r.url).toBe('20');
    expect(reads.some((r) => new URL(r.url).searchParams.has('cursor'))).toBe(true);
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
  });
});

describe.skipIf(noChromium)('a client key', () => {
  it('reads the runs, the operations and the schedules, with no selection, action or form', async () => {
    const made = await acme.post('/schedules', { cron: '0 6 * * *', run: { sessionId: 'morning', input: { content: 'wake up' }, runtime: idle } });
    expect(made.status).toBe(201);
    await queued(acme, 'client-1', 'stuck');
    const client = await h.key('acme', 'client');

    const w = await loggedIn(client, '/ui/runs');
    await untilText(w.page.locator('.who'), 'scope acme · client key');
    await w.page.locator('table.runs tbody tr').first().waitFor();
    await untilText(w.page.locator('#ops-h'), 'Recent bulk operations');
    await w.page.locator('table.operations tbody tr').first().waitFor();
    expect(await w.page.locator('main input[type="checkbox"]').count()).toBe(0);
    expect(await w.page.locator('.run-actions').count()).toBe(0);
    expect(await button(w.page, 'Cancel all matching this filter').count()).toBe(0);

    await w.page.getByRole('link', { name: 'Schedules' }).click();
    const card = w.page.locator(`article.schedule[data-schedule="${made.body.id}"]`);
    await untilText(card.locator('h2'), '0 6 * * * active');
    await waitFor(async () => (await card.locator('ol.fire-times li').count()) === 5, 10_000, 'five fire times');
    expect(await card.getByRole('button').count()).toBe(0);
    expect(await w.page.getByRole('heading', { name: 'Make a schedule' }).count()).toBe(0);
    expect(await w.page.locator('form.schedule-form').count()).toBe(0);
    await screenshots(w.page, 'schedules-client');
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
  });
});
