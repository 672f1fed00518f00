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
import { uiRoutes } from '../src/api/routes-ui.ts';
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

describe('the app at /ui', () => {
  /** The routes alone on a folder the test lays out, behind the API's error handler. */
  async function serve(dir: string): Promise<string> {
    const app = express();
    // The UI's routes need nothing of the process: no dependency is handed to them.
    app.use(mountRoutes(uiRoutes(dir), '', {} as AppDeps));
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
    writeFileSync(join(dir, 'index.html'), '<!doctype html><title>app</title>');
    writeFileSync(join(dir, 'assets', 'index-abc123.js'), 'console.log(1)');
    writeFileSync(join(dir, 'favicon.svg'), '<svg/>');
    writeFileSync(join(dir, '.secret'), 'hidden');
    const base = await serve(dir);

    const root = await fetch(`${base}/`, { redirect: 'manual' });
    expect(root.status).toBe(302);
    expect(root.headers.get('location')).toBe('/ui');
    for (const path of ['/ui', '/ui/', '/ui/runs/r123', '/ui/sessions/s1', '/ui/runtimes', '/ui/index.html']) {
      const res = await fetch(base + path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toContain('text/html');
      expect(res.headers.get('cache-control'), path).toBe('no-cache');
      expect(await res.text(), path).toContain('<title>app</title>');
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
