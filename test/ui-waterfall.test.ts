import { fileURLToPath } from 'node:url';
import type { BrowserContext, Page } from 'playwright-core';
import { beforeAll, expect, it } from 'vitest';
import { artifactPath, ensureUiBuilt, launchBrowser, openPage, untilText, type WatchedPage } from './helpers/browser.ts';
import { skipWithout } from './helpers/programs.ts';
import { fx, fxSet } from './helpers/engine.ts';
import { useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * The run inspector's waterfall in Chromium, for a run that goes through a transient retry,
 * the SIGKILL of its worker and the takeover by another, memo hits, a tool step and a wait
 * resumed through another API process. Everything is real: two `baton api` and two
 * `baton worker` processes on Redis. The bars must be the run's attempts and steps as the API
 * reports them, in the same order, each step under the attempt bar that ran it.
 */
const AGENTS = fileURLToPath(new URL('./fixtures/waterfall-agents.ts', import.meta.url));

let h: Harness;
let api1: Child;
let api2: Child;
let workerA: Child;
let acme: ScopeClient;
let browser: BrowserContext;

beforeAll(async () => {
  ensureUiBuilt();
  h = await useHarness();
  [api1, api2, workerA] = await Promise.all([
    h.spawn('api'), h.spawn('api'), h.spawn('worker', { agents: [AGENTS], env: { FX_TAG: 'A' } }),
  ]);
  acme = await h.client(api1.url!, 'acme', 'admin');
  browser = await launchBrowser();
}, 60_000);

interface DrawnRow { kind: string; key: string; bar: string | undefined; name: string; summary: string }

/** The waterfall's rows as drawn, top to bottom. */
const drawn = (page: Page): Promise<DrawnRow[]> =>
  page.locator('ol.waterfall > li').evaluateAll((lis) => lis.map((li) => ({
    kind: (li as HTMLElement).dataset.kind!,
    key: (li as HTMLElement).dataset.key!,
    bar: (li as HTMLElement).dataset.bar,
    name: li.querySelector('.wf-name')?.textContent ?? '',
    summary: li.querySelector('.wf-summary')?.textContent ?? '',
  })));

async function runPage(path: string, width: number): Promise<WatchedPage> {
  const w = await openPage(browser);
  await w.page.setViewportSize({ width, height: 900 });
  await w.page.goto(`${api1.url}/ui${path}#key=${encodeURIComponent(acme.key)}`);
  await w.page.getByRole('button', { name: 'Log out' }).waitFor();
  return w;
}

const STEP_KINDS = new Set(['step', 'infer', 'tool', 'wait']);

/** Without Chromium (a developer's machine that lacks it) this test is skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

it.skipIf(noChromium)('draws a run with a retry, a takeover, memo hits, a tool and a resumed wait: one bar per attempt and step, in order', async () => {
  const run = (await acme.submit('wf-1', 'the draft', { agent: 'wf-tour' })).body;
  // Execution 2 (attempt 2, after the retry) ran the inference and holds on: the page follows it live.
  await waitFor(() => fx(h, run.id, 'reached'), 30_000, 'the second execution');
  const live = await runPage(`/runs/${run.id}`, 1280);
  await waitFor(async () => (await drawn(live.page)).filter((r) => r.kind === 'attempt').map((r) => r.summary).join() === 'retrying,running',
    20_000, 'attempt 2 running on the page');

  await workerA.kill('SIGKILL');
  await fxSet(h, run.id, 'go');
  await h.spawn('worker', { agents: [AGENTS], env: { FX_TAG: 'B' } });
  await acme.waitStatus(run.id, ['waiting'], 30_000);
  const other = await h.client(api2.url!, 'acme', 'client');
  expect((await other.post(`/runs/${run.id}/waits/wait:approval:1`, { value: { ok: true } })).status).toBe(200);
  const done = await acme.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
  expect(done).toMatchObject({ status: 'succeeded', attempt: 2, recoveries: 1, result: { answer: 'drafted; approved=true' } });
  // Every step body ran once: each later attempt bar had them from the memo.
  for (const body of ['prepare', 'lookup', 'draft', 'publish']) expect(await fx(h, run.id, body), body).toBe('1');
  expect(await fx(h, run.id, 'executions')).toBe('4');

  // What the API says: the attempts (the stream's `attempt` events) and the steps, in order.
  const { events } = await acme.sse(`/runs/${run.id}/events`);
  const attempts = events.filter((e) => e.event === 'attempt').map((e) => e.data);
  expect(attempts).toEqual([
    { attempt: 1, maxAttempts: 3 }, { attempt: 2, maxAttempts: 3 },
    { attempt: 2, maxAttempts: 3, recovered: true }, { attempt: 2, maxAttempts: 3, resumed: true },
  ]);
  const steps: { key: string }[] = (await acme.get(`/runs/${run.id}/steps`)).body.steps;
  expect(steps.map((s) => s.key)).toEqual(['step:prepare:1', 'tool:lookup:1', 'infer:draft:1', 'wait:approval:1', 'step:publish:1']);

  const expectDrawn = (rows: DrawnRow[]) => {
    // One bar per attempt event, in order, named for how it started, ended as the run did.
    const bars = rows.filter((r) => r.kind === 'attempt');
    expect(bars.map((r) => r.name)).toEqual(attempts.map((a) =>
      `Attempt ${a.attempt}${a.recovered ? ' · taken over' : a.resumed ? ' · after the wait' : ''}`));
    expect(bars.map((r) => r.summary)).toEqual(['retrying', 'worker lost', 'parked', 'succeeded']);
    // One bar per step, in the API's order.
    expect(rows.filter((r) => STEP_KINDS.has(r.kind)).map((r) => r.key)).toEqual(steps.map((s) => `step-${s.key}`));
    // The whole picture, top to bottom: each step under the bar that ran it, memo hits under
    // each later bar, the time between bars (queued, backoff, no worker, the wait).
    expect(rows.map((r) => [r.kind, r.bar ?? '', r.key.replace(/^(step|memo-\d+)-/, '')])).toEqual([
      ['queued', '', expect.stringMatching(/^queued-/)],
      ['attempt', '1', 'bar-1'],
      ['step', '1', 'step:prepare:1'],
      ['tool', '1', 'tool:lookup:1'],
      ['backoff', '', expect.stringMatching(/^backoff-/)],
      ['attempt', '2', 'bar-2'],
      ['memo', '2', 'step:prepare:1'],
      ['memo', '2', 'tool:lookup:1'],
      ['infer', '2', 'infer:draft:1'],
      ['lapse', '', expect.stringMatching(/^lapse-/)],
      ['attempt', '3', 'bar-3'],
      ['memo', '3', 'step:prepare:1'],
      ['memo', '3', 'tool:lookup:1'],
      ['memo', '3', 'infer:draft:1'],
      ['wait', '', 'wait:approval:1'],
      ['attempt', '4', 'bar-4'],
      ['memo', '4', 'step:prepare:1'],
      ['memo', '4', 'tool:lookup:1'],
      ['memo', '4', 'infer:draft:1'],
      ['memo', '4', 'wait:approval:1'],
      ['step', '4', 'step:publish:1'],
    ]);
  };

  // The page that followed the run live, and one opened after it ended, draw the same.
  await untilText(live.page.locator('h1 .badge'), 'succeeded');
  await waitFor(async () => (await drawn(live.page)).some((r) => r.key === 'step-step:publish:1'), 20_000, 'the last step drawn');
  expectDrawn(await drawn(live.page));
  const fresh = await runPage(`/runs/${run.id}`, 1280);
  await untilText(fresh.page.locator('h1 .badge'), 'succeeded');
  await waitFor(async () => (await drawn(fresh.page)).length === 21, 20_000, 'the fresh page drawn');
  expectDrawn(await drawn(fresh.page));

  // Hovering a bar shows its times and how it ended.
  const chart = fresh.page.locator('section[aria-labelledby="waterfall-h"]');
  const lost = chart.locator('li[data-key="bar-2"] > button');
  await lost.hover();
  const tip = chart.getByRole('tooltip');
  const time = /\d\d:\d\d:\d\d\.\d{3} \(\+[\d.]+ (ms|s)\)/;
  await untilText(tip, (t) => t.startsWith('Attempt 2 · worker lost') && t.includes('another took the run over'), 'the lost bar\'s details');
  const text = (await tip.textContent())!;
  expect(text).toMatch(new RegExp(`Start${time.source}`));
  expect(text).toMatch(new RegExp(`End${time.source}`));
  expect(text).toMatch(/Took[\d.]+ (ms|s)/);
  expect(await lost.getAttribute('aria-describedby')).toBe(await tip.getAttribute('id'));
  await fresh.page.mouse.move(0, 0);
  await tip.waitFor({ state: 'detached' });
  // A click pins them (the mouse gone, they stay); Escape closes them.
  await lost.click();
  await fresh.page.mouse.move(0, 0);
  await untilText(tip, (t) => t.startsWith('Attempt 2 · worker lost'), 'the pinned details');
  await chart.screenshot({ path: artifactPath('waterfall-1280.png') });
  await fresh.page.keyboard.press('Escape');
  await tip.waitFor({ state: 'detached' });

  // At a phone's width: nothing scrolls sideways, each label sits above its bar, and a tap
  // (a click: the same handler) pins a row's details until tapped again.
  await fresh.page.setViewportSize({ width: 390, height: 844 });
  const sideways = await fresh.page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
  expect(sideways).toBeLessThanOrEqual(0);
  const row = chart.locator('li[data-key="memo-3-infer:draft:1"] > button');
  const [label, track] = await Promise.all([row.locator('.wf-label').boundingBox(), row.locator('.wf-track').boundingBox()]);
  expect(label!.y + label!.height).toBeLessThanOrEqual(track!.y);
  expect(track!.width).toBeGreaterThan(300);
  await row.click();
  await untilText(tip, (t) => t.startsWith('infer draft · memo hit') && t.includes('not run again: stored by attempt bar 2 at'),
    'the memo hit\'s details');
  await fresh.page.mouse.move(0, 0);
  await chart.screenshot({ path: artifactPath('waterfall-390.png') });
  await row.click();
  await fresh.page.mouse.move(0, 0);
  await tip.waitFor({ state: 'detached' });

  expect(live.errors).toEqual([]);
  expect(fresh.errors).toEqual([]);
  await Promise.all([live.page.close(), fresh.page.close()]);
}, 120_000);
