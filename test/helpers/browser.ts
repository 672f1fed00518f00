import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { ROOT, waitFor } from './harness.ts';
import { track } from './resources.ts';

/** Debian's Chromium; the tests never download a browser of their own. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Screenshots for a person to look at; gitignored. */
export const ARTIFACTS = join(ROOT, 'test-artifacts', 'ui');

/**
 * Builds the run inspector when dist/ui is missing or older than any of its sources (the UI,
 * the client code it bundles, its build config, the installed packages), so the browser
 * tests always load what the sources say.
 */
export function ensureUiBuilt(): void {
  const index = join(ROOT, 'dist', 'ui', 'index.html');
  const inputs = [join(ROOT, 'src', 'ui'), join(ROOT, 'src', 'lib', 'client'), join(ROOT, 'vite.ui.config.ts'), join(ROOT, 'package-lock.json')];
  const newest = Math.max(...inputs.flatMap(files).map((f) => statSync(f).mtimeMs));
  if (existsSync(index) && statSync(index).mtimeMs >= newest) return;
  const vite = join(ROOT, 'node_modules', 'vite', 'bin', 'vite.js');
  // NODE_ENV is `test` inside vitest; Vite would then build a development bundle.
  const env = { ...process.env, NODE_ENV: 'production' };
  const r = spawnSync(process.execPath, [vite, 'build', '--config', 'vite.ui.config.ts'], { cwd: ROOT, encoding: 'utf8', env });
  if (r.status !== 0) throw new Error(`npm run build:ui failed:\n${r.stdout}\n${r.stderr}`);
}

function files(path: string): string[] {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path).flatMap((f) => files(join(path, f)));
}

/**
 * Headless Chromium with a fresh profile, as the machine's notes require: no sandbox (root),
 * no GPU, and none of the background traffic a closed network refuses.
 */
export async function launchBrowser(): Promise<BrowserContext> {
  if (!existsSync(CHROMIUM)) throw new Error(`browser tests need Chromium at ${CHROMIUM} (Debian: apt-get install -y chromium)`);
  const profile = mkdtempSync(join(tmpdir(), 'baton-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic',
    ],
    viewport: { width: 1280, height: 900 },
  });
  return track(context, async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  });
}

export interface WatchedPage {
  page: Page;
  /** Console errors, uncaught exceptions and CSP violations seen so far. */
  errors: string[];
}

/** A new tab whose console errors and page errors are collected for the test to check. */
export async function openPage(context: BrowserContext): Promise<WatchedPage> {
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  return { page, errors };
}

/** A response a page got. */
export interface Answered { method: string; url: string; status: number }

/** A new tab logged in with `key` through the link fragment, at `path` of the API at `apiUrl`; every response it gets is kept. */
export async function openLoggedIn(
  context: BrowserContext, apiUrl: string, key: string, path: string,
): Promise<WatchedPage & { responses: Answered[] }> {
  const w = await openPage(context);
  const responses: Answered[] = [];
  w.page.on('response', (r) => responses.push({ method: r.request().method(), url: r.url(), status: r.status() }));
  await w.page.goto(`${apiUrl}${path}#key=${encodeURIComponent(key)}`);
  await w.page.getByRole('button', { name: 'Log out' }).waitFor();
  return { ...w, responses };
}

/** Waits until the locator's text, spaces collapsed, passes `check` (or equals the string). */
export async function untilText(loc: Locator, check: string | ((text: string) => boolean), what = String(check)): Promise<string> {
  const ok = typeof check === 'string' ? (t: string) => t === check : check;
  let last = '';
  try {
    return await waitFor(async () => {
      last = ((await loc.first().textContent({ timeout: 1000 }).catch(() => null)) ?? '').replace(/\s+/g, ' ').trim();
      return ok(last) ? last : undefined;
    }, 20_000, `text ${what}`);
  } catch (err) {
    throw new Error(`${(err as Error).message}; the page showed ${JSON.stringify(last)}`, { cause: err });
  }
}

export function artifactPath(name: string): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return join(ARTIFACTS, name);
}
