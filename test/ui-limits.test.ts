import type { BrowserContext, Locator, Page } from 'playwright-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ApiHandle } from '../src/api/server.ts';
import { artifactPath, ensureUiBuilt, launchBrowser, openLoggedIn, untilText, type WatchedPage } from './helpers/browser.ts';
import { skipWithout } from './helpers/programs.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

/**
 * The run inspector's Limits view, in Debian's Chromium against a real API on a real Redis: a
 * scope's admin key sees the limits in force, where each comes from and what is in use; an
 * operator key (bound to no scope) picks a scope, edits its limits and saves them, a value out
 * of range showing the API's error beside its field and saving nothing; a client key has no
 * Limits entry. No page may log a console error (a CSP violation is one), and the operator's
 * tab never makes a request the API refuses.
 */

let h: Harness;
let api: ApiHandle;
let operator: string;
let browser: BrowserContext;
let pages: WatchedPage[] = [];

beforeAll(async () => {
  ensureUiBuilt();
  h = await useHarness();
  api = await h.startApi();
  operator = await h.operatorKey();
  browser = await launchBrowser();
});

afterEach(async () => {
  for (const p of pages) await p.page.close();
  pages = [];
});

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const limitsOf = async (scope: string) => (await call(api.url, 'GET', `/v1/scopes/${scope}/limits`, undefined, bearer(operator))).body;
const putLimits = (scope: string, body: unknown) => call(api.url, 'PUT', `/v1/scopes/${scope}/limits`, body, bearer(operator));

/** A tab logged in with `key` at `path`, closed with the file's other tabs. */
async function loggedIn(key: string, path = '/ui') {
  const w = await openLoggedIn(browser, api.url, key, path);
  pages.push(w);
  return w;
}

/** The table row of one limit, and its cells by their label. */
const row = (page: Page, field: string) => page.locator(`table.limits tr[data-limit="${field}"]`);
const cell = (r: Locator, label: string) => r.locator(`[data-label="${label}"]`);
const navLinks = async (page: Page) => (await page.getByRole('navigation', { name: 'Views' }).getByRole('link').allTextContents()).map((t) => t.trim());

async function screenshots(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: artifactPath(`${name}-desktop.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: artifactPath(`${name}-phone.png`), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
}

describe.skipIf(noChromium)('the Limits view', () => {
  it('shows an admin key its scope’s limits in force, where each comes from and what is in use, refreshed', async () => {
    expect((await putLimits('acme', { maxActive: 1, tokensPerDay: 50_000 })).status).toBe(200);
    const acme = await h.client(api.url, 'acme', 'client');
    // No worker serves this runtime: the first run holds the scope's one slot, the others are parked.
    for (let i = 0; i < 3; i++) expect((await acme.submit(`s${i}`, 'wait', { runtime: `${h.runtime}-none` })).status).toBe(202);
    const answer = await limitsOf('acme');
    expect(answer.inUse).toMatchObject({ active: 1, parked: 2, streams: 0, tokensToday: 0 });

    const w = await loggedIn(await h.key('acme', 'admin'), '/ui/runs');
    expect(await navLinks(w.page)).toEqual(['Runs', 'Runtimes', 'Schedules', 'Limits']);
    await w.page.getByRole('link', { name: 'Limits' }).click();
    expect(new URL(w.page.url()).pathname).toBe('/ui/limits');
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Limits of scope acme');

    const maxActive = row(w.page, 'maxActive');
    await untilText(cell(maxActive, 'In force'), '1');
    await untilText(cell(maxActive, 'Set by'), `operator (default ${h.config.MAX_ACTIVE_PER_SCOPE})`);
    await untilText(cell(maxActive, 'In use'), '1 of 1 active 2 parked (runnable, held back by a limit)');
    expect(await cell(maxActive, 'In use').locator('meter').getAttribute('value')).toBe('1');
    await untilText(cell(row(w.page, 'tokensPerDay'), 'In force'), '50,000');
    await untilText(cell(row(w.page, 'tokensPerDay'), 'In use'), '0 of 50,000 used today (UTC)');
    // A limit the operator did not set is its default, as the API answers it.
    const streams = row(w.page, 'maxStreams');
    await untilText(cell(streams, 'In force'), answer.defaults.maxStreams.toLocaleString('en-US'));
    await untilText(cell(streams, 'Set by'), 'default');
    await untilText(cell(streams, 'In use'), `0 of ${answer.limits.maxStreams.toLocaleString('en-US')} open on the API process that answered`);
    await untilText(cell(row(w.page, 'maxActivePerKey'), 'In force'), answer.limits.maxActivePerKey === null ? 'none' : String(answer.limits.maxActivePerKey));
    // An admin key has no form: only an operator key sets limits.
    expect(await w.page.getByRole('button', { name: 'Save limits' }).count()).toBe(0);

    // The page follows a change made elsewhere: the operator raises maxActive, the parked runs take the slots.
    expect((await putLimits('acme', { maxActive: 4, tokensPerDay: 50_000 })).status).toBe(200);
    await untilText(cell(maxActive, 'In force'), '4');
    await untilText(cell(maxActive, 'In use'), '3 of 4 active 0 parked (runnable, held back by a limit)');
    await screenshots(w.page, 'limits-admin');
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
  });

  it('lets an operator key pick a scope and set its limits; a value out of range shows the API’s error and saves nothing', async () => {
    await putLimits('globex', { maxActive: 1, weight: 2 });
    const g = await h.client(api.url, 'globex', 'client');
    for (let i = 0; i < 2; i++) expect((await g.submit(`g${i}`, 'wait', { runtime: `${h.runtime}-none` })).status).toBe(202);

    // Logged in at /ui, an operator key lands on the Limits view: it has no runs to show.
    const w = await loggedIn(operator, '/ui');
    await untilText(w.page.locator('.who'), 'operator key');
    await waitFor(() => new URL(w.page.url()).pathname === '/ui/limits', 10_000, 'the move to /ui/limits');
    expect(await navLinks(w.page)).toEqual(['Limits']);
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Limits of a scope');

    // The scope's id is checked with the API's pattern before anything is asked.
    const scope = w.page.getByLabel('Scope', { exact: true });
    await scope.fill('glo{bex}');
    await w.page.getByRole('button', { name: 'Show limits' }).click();
    await untilText(w.page.locator('#limits-scope-error'), 'A scope id must be 1-64 of A-Z a-z 0-9 . _ - and start with a letter or digit.');
    expect(new URL(w.page.url()).pathname).toBe('/ui/limits');
    await scope.fill('globex');
    await w.page.getByRole('button', { name: 'Show limits' }).click();
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Limits of scope globex');
    expect(new URL(w.page.url()).pathname).toBe('/ui/limits/globex');
    const maxActive = row(w.page, 'maxActive');
    await untilText(cell(maxActive, 'In use'), '1 of 1 active 1 parked (runnable, held back by a limit)');
    await untilText(cell(row(w.page, 'weight'), 'Set by'), `operator (default ${h.config.SCOPE_WEIGHT})`);

    // The form holds the operator's overrides; empty fields are the defaults.
    const field = (name: string) => w.page.getByLabel(name, { exact: true });
    expect(await field('maxActive').inputValue()).toBe('1');
    expect(await field('weight').inputValue()).toBe('2');
    expect(await field('submitBurst').inputValue()).toBe('');
    await field('maxActive').fill('3');
    await field('maxActivePerKey: none').check();
    await w.page.getByRole('button', { name: 'Save limits' }).click();
    await untilText(w.page.locator('.limits-form .note'), 'Saved: 3 overrides, the other limits at their defaults.');
    const saved = await limitsOf('globex');
    expect(saved.limits.maxActive).toBe(3);
    expect(saved.set).toEqual({ maxActive: 3, maxActivePerKey: null, weight: 2 });
    await untilText(cell(maxActive, 'In force'), '3');
    await untilText(cell(maxActive, 'In use'), '2 of 3 active 0 parked (runnable, held back by a limit)');
    await untilText(cell(row(w.page, 'maxActivePerKey'), 'In force'), 'none');
    await untilText(cell(row(w.page, 'maxActivePerKey'), 'Set by'), (t) => t.startsWith('operator (default '), 'maxActivePerKey set by the operator');

    // Out of range: the API's own message next to the field, and nothing saved.
    const refused = await putLimits('globex', { maxActive: 0 });
    expect([refused.status, refused.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);
    const apiSays = refused.body.error.details.find((d: { path: string }) => d.path === 'body.maxActive').message as string;
    await field('maxActive').fill('0');
    await w.page.getByRole('button', { name: 'Save limits' }).click();
    await untilText(w.page.locator('#limit-maxActive-error'), apiSays);
    const refusal = (t: string) => t.startsWith('Nothing was saved: ') && t.endsWith('(VALIDATION_FAILED); see maxActive');
    await untilText(w.page.locator('.limits-form [role="alert"]'), refusal, 'the refusal');
    await waitFor(async () => (await w.page.evaluate(() => document.activeElement?.id)) === 'limit-maxActive', 5_000, 'focus on the field');
    expect(await field('maxActive').getAttribute('aria-invalid')).toBe('true');
    expect(await field('maxActive').inputValue()).toBe('0');
    expect(await w.page.locator('.field-error').count()).toBe(1);
    expect((await limitsOf('globex')).set).toEqual({ maxActive: 3, maxActivePerKey: null, weight: 2 });
    // The table keeps showing what is in force after the next refresh.
    const refreshes = w.responses.filter((r) => r.url.endsWith('/v1/scopes/globex/limits')).length;
    await waitFor(() => w.responses.filter((r) => r.url.endsWith('/v1/scopes/globex/limits')).length > refreshes + 1, 10_000, 'two refreshes');
    await untilText(cell(maxActive, 'In force'), '3');
    await screenshots(w.page, 'limits-operator');

    // Not a number is caught on the page, before any request.
    const puts = w.responses.length;
    await field('submitBurst').fill('lots');
    await w.page.getByRole('button', { name: 'Save limits' }).click();
    await untilText(w.page.locator('#limit-submitBurst-error'), 'Enter a number, or leave the field empty for the default.');
    expect(w.responses.slice(puts).filter((r) => r.method !== 'GET')).toEqual([]);

    // The only refusal the tab saw is the 400 it was meant to show; it asked for no scope's runs.
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([{ method: 'PUT', url: `${api.url}/v1/scopes/globex/limits`, status: 400 }]);
    expect(w.responses.some((r) => /\/v1\/scopes\/[^/]+\/(runs|runtimes|sessions)/.test(r.url))).toBe(false);
    // The browser's own note of that 400 is the only console line.
    expect(w.errors.filter((e) => !/status of 400/.test(e))).toEqual([]);
  });

  it('sends an operator key that opens a runs link to the Limits view, with no request the API would refuse', async () => {
    const w = await loggedIn(operator, '/ui/runs/r-anything');
    await waitFor(() => new URL(w.page.url()).pathname === '/ui/limits', 10_000, 'the move to /ui/limits');
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Limits of a scope');
    // A scope typed in the address is checked the same way.
    await w.page.goto(`${api.url}/ui/limits/no%20such%20id`);
    await untilText(w.page.locator('#limits-scope-error'), (t) => t.startsWith('"no such id" is not a scope id'), 'the id check');
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);

    // A link with a scope's key asks before it replaces the operator key, and names both.
    await w.page.goto(`${api.url}/ui/runs#key=${encodeURIComponent(await h.key('acme', 'admin'))}`);
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Switch to scope acme?');
    const says = (await w.page.locator('main p').textContent())!.replace(/\s+/g, ' ');
    expect(says).toContain('carries a key of scope acme (admin key)');
    expect(says).toContain('This tab is logged in with an operator key');
    await w.page.getByRole('button', { name: 'Stay on the operator key' }).click();
    await untilText(w.page.locator('.who'), 'operator key');
    await waitFor(() => new URL(w.page.url()).pathname === '/ui/limits', 10_000, 'the move to /ui/limits');
    expect(w.errors).toEqual([]);
  });

  it('shows an admin key the limits of its own scope only', async () => {
    const w = await loggedIn(await h.key('acme', 'admin'), '/ui/limits/globex');
    await untilText(w.page.locator('main p'), (t) => t.startsWith('This key reads the limits of its own scope only'), 'the note');
    await w.page.getByRole('link', { name: 'the limits of scope acme' }).click();
    await untilText(w.page.getByRole('heading', { level: 1 }), 'Limits of scope acme');
    expect(w.responses.filter((r) => r.url.includes('/v1/scopes/globex'))).toEqual([]);
    expect(w.errors).toEqual([]);
  });

  it('has no Limits entry for a client key, and its address says why without asking the API', async () => {
    const w = await loggedIn(await h.key('acme', 'client'), '/ui/runs');
    await untilText(w.page.locator('.who'), 'scope acme · client key');
    expect(await navLinks(w.page)).toEqual(['Runs', 'Runtimes', 'Schedules']);
    await w.page.goto(`${api.url}/ui/limits`);
    await untilText(w.page.locator('main p'), "A scope's limits are shown to its admin key and to operator keys; this is a client key.");
    expect(await navLinks(w.page)).toEqual(['Runs', 'Runtimes', 'Schedules']);
    expect(w.responses.filter((r) => r.url.includes('/limits') && r.url.includes('/v1/'))).toEqual([]);
    expect(w.responses.filter((r) => r.status >= 400)).toEqual([]);
    expect(w.errors).toEqual([]);
  });
});
