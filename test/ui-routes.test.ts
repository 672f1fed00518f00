import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express from 'express';
import { describe, expect, it } from 'vitest';
import { errorHandler } from '../src/api/error-handler.ts';
import type { AppDeps } from '../src/api/deps.ts';
import { mountRoutes } from '../src/api/route.ts';
import { baseHref, uiRoutes } from '../src/api/routes-ui.ts';
import { createLogger } from '../src/lib/logger.ts';
import { track } from './helpers/resources.ts';

/**
 * The run inspector's files at /ui: its routes alone, on folders the tests lay out (the
 * browser tests in ui.test.ts load the real build through a real API).
 */

/** A GET with the path exactly as given. */
function rawGet(base: string, path: string): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, path, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** An index.html as Vite writes it: files named relative to the page. */
const INDEX = '<!doctype html><html><head>\n<meta charset="utf-8"><title>app</title><script type="module" src="./assets/index-abc123.js"></script></head><body></body></html>';

describe('the app at /ui', () => {
  /** The routes alone on a folder the test lays out, behind the API's error handler, mounted at `mount`. */
  async function serve(dir: string, mount = '/'): Promise<string> {
    const app = express();
    // The UI's routes need nothing of the process: no dependency is handed to them.
    app.use(mount, mountRoutes(uiRoutes(dir), '', {} as AppDeps));
    app.use(errorHandler(createLogger('silent')));
    const server = createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    track(server, () => new Promise((r) => server.close(r)));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  it('redirects / to /ui, serves the build, and answers every other /ui path with the app', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-ui-'));
    track(null, async () => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), INDEX);
    writeFileSync(join(dir, 'assets', 'index-abc123.js'), 'console.log(1)');
    writeFileSync(join(dir, 'favicon.svg'), '<svg/>');
    writeFileSync(join(dir, '.secret'), 'hidden');
    const base = await serve(dir);

    const root = await fetch(`${base}/`, { redirect: 'manual' });
    expect(root.status).toBe(302);
    // Relative, like everything the app is served with: `ui` beside `/` is /ui.
    expect(root.headers.get('location')).toBe('ui');
    const bases = { '/ui': 'ui/', '/ui/': './', '/ui/runs/r123': '../', '/ui/sessions/s1': '../', '/ui/runtimes': './', '/ui/schedules': './', '/ui/index.html': './' };
    for (const [path, href] of Object.entries(bases)) {
      const res = await fetch(base + path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toContain('text/html');
      expect(res.headers.get('cache-control'), path).toBe('no-cache');
      const html = await res.text();
      expect(html, path).toContain('<title>app</title>');
      // The base comes first in the head, so every URL after it resolves against the app's folder.
      expect(html, path).toContain(`<head>\n    <base href="${href}" />\n<meta charset="utf-8">`);
      expect(new URL(href, base + path).pathname, path).toBe('/ui/');
    }
    const js = await fetch(`${base}/ui/assets/index-abc123.js`);
    expect(js.headers.get('content-type')).toContain('javascript');
    expect(js.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(await js.text()).toBe('console.log(1)');
    expect((await fetch(`${base}/ui/favicon.svg`)).headers.get('content-type')).toContain('image/svg+xml');

    const gone = await fetch(`${base}/ui/assets/index-old.js`);
    expect(gone.status).toBe(404);
    expect((await gone.json()).error.code).toBe('NOT_FOUND');
    // Hidden files and paths that climb out are never files of the build: they get the app.
    // (Sent raw: fetch would resolve the dot segments before they reach the server.)
    for (const path of ['/ui/.secret', '/ui/..%2f..%2fpackage.json', '/ui/%2e%2e/%2e%2e/package.json']) {
      const res = await rawGet(base, path);
      expect(res.status, path).toBe(200);
      expect(res.text, path).toContain('<title>app</title>');
    }
    const climbing = await rawGet(base, '/ui/assets/../../package.json');
    expect(climbing.status).toBe(404);
    expect(climbing.text).not.toContain('baton');
  });

  it('serves the app for a view whose address carries a query string (a shared filter)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-ui-query-'));
    track(null, async () => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), INDEX);
    writeFileSync(join(dir, 'assets', 'index-abc123.js'), 'console.log(1)');
    const base = await serve(dir);
    // The query is the app's: the base is worked out from the path alone.
    const views = {
      '/ui/runs?status=failed': './', '/ui?status=failed&agent=triage': 'ui/', '/ui/?runtime=gpu&runtime=cpu': './',
      '/ui/runs/r1?tab=steps': '../', '/ui/runs?status=not-a-status&x=%zz': './', '/ui/runs?': './',
    };
    for (const [path, href] of Object.entries(views)) {
      const res = await rawGet(base, path);
      expect(res.status, path).toBe(200);
      expect(res.text, path).toContain('<title>app</title>');
      expect(res.text, path).toContain(`<base href="${href}" />`);
      expect(new URL(href, base + path).pathname, path).toBe('/ui/');
    }
    // A file of the build asked for with a query (a cache buster) is still the file.
    const js = await fetch(`${base}/ui/assets/index-abc123.js?v=2`);
    expect([js.status, await js.text()]).toEqual([200, 'console.log(1)']);
  });

  it('mounted under a path, leads every address of the app back to that path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-ui-mounted-'));
    track(null, async () => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), INDEX);
    writeFileSync(join(dir, 'assets', 'index-abc123.js'), 'console.log(1)');
    const base = await serve(dir, '/agents/v2');

    // The mount point with and without its slash: both redirect to <mount>/ui.
    for (const path of ['/agents/v2', '/agents/v2/']) {
      const res = await fetch(base + path, { redirect: 'manual' });
      expect(res.status, path).toBe(302);
      expect(new URL(res.headers.get('location')!, base + path).pathname, path).toBe('/agents/v2/ui');
    }
    const followed = await fetch(`${base}/agents/v2`);
    expect(new URL(followed.url).pathname).toBe('/agents/v2/ui');
    for (const path of ['/agents/v2/ui', '/agents/v2/ui/', '/agents/v2/ui/runs/r1', '/agents/v2/ui/runs/r1/', '/agents/v2/ui/no/such/view']) {
      const html = await (await fetch(base + path)).text();
      const href = /<base href="([^"]*)"/.exec(html)?.[1];
      expect(href, path).toBeDefined();
      const root = new URL(href!, base + path);
      expect(root.pathname, path).toBe('/agents/v2/ui/');
      // What the page loads, relative to its base, is there.
      const js = await fetch(new URL('./assets/index-abc123.js', root));
      expect(js.status, path).toBe(200);
    }
    // Not at the root: the mount point owns the app.
    expect((await fetch(`${base}/ui`)).status).toBe(404);
  });

  it('counts the segments of a view as the browser does', () => {
    expect(baseHref('/ui')).toBe('ui/');
    expect(baseHref('/ui/')).toBe('./');
    expect(baseHref('/ui/runs')).toBe('./');
    expect(baseHref('/ui/runs/r1')).toBe('../');
    expect(baseHref('/ui/runs/r1/')).toBe('../../');
    expect(baseHref('/ui/a%2Fb/c')).toBe('../');
    expect(baseHref('/ui/a/b/c/d')).toBe('../../../');
  });

  it('without a build, says how to make one instead of failing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-ui-missing-'));
    track(null, async () => rmSync(dir, { recursive: true, force: true }));
    const base = await serve(dir);
    for (const path of ['/ui', '/ui/runs/r1']) {
      const res = await fetch(base + path);
      expect(res.status, path).toBe(404);
      const body = await res.json();
      expect(body.error.code).toBe('NOT_FOUND');
      expect(body.error.message).toContain('npm run build:ui');
    }
  });
});
