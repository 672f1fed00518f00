import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NextFunction, Response } from 'express';
import { z } from 'zod';
import { BatonError } from '../lib/errors.ts';
import { route, type RouteSpec } from './route.ts';

/**
 * Where `npm run build:ui` writes the run inspector: `<package>/dist/ui`, the same folder
 * whether this file runs from src/api or compiled into dist/api.
 */
const BUILT_UI = fileURLToPath(new URL('../../dist/ui/', import.meta.url));

/** A path segment of a built file: Vite's hashed names, nothing hidden, nothing that climbs. */
const FILE_SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

/** Hashed assets never change under their name; a new build gives new names. */
const ASSET_CACHE = { maxAge: '365d', immutable: true } as const;

/**
 * The run inspector, a single-page app that talks to the public API like any client:
 * `/` redirects to `/ui`, files of the build are served as they are, and every other
 * `/ui/...` path is one of the app's own views, answered with its index.html. Without a
 * build it answers a 404 that says how to make one, instead of failing.
 */
export function uiRoutes(dir = BUILT_UI): RouteSpec[] {
  return [
    route({
      method: 'get', path: '/', summary: 'Redirects to the run inspector.', access: 'public',
      ok: { 302: { description: 'to /ui' } },
      handler: ({ http: { req } }) => ({ status: 302, headers: { location: `${req.baseUrl}/ui` } }),
    }),
    route({
      method: 'get', path: '/ui', summary: 'The run inspector, a single-page app (log in with an API key).', access: 'public',
      ok: { 200: { description: 'the app', schema: z.string(), contentType: 'text/html' } },
      errors: ['NOT_FOUND'],
      handler: ({ http: { res } }) => new Promise<void>((resolve, reject) => sendIndex(dir, res, (err) => (err ? reject(err) : resolve()), resolve)),
    }),
    route({
      method: 'get', path: '/ui/*path', summary: "The run inspector's files; any other path is one of its views (its index.html).",
      access: 'public',
      // Express 5 hands a wildcard over as its segments.
      params: z.strictObject({ path: z.array(z.string()).describe('a file of the build, or a view such as runs/{runId}') }),
      ok: { 200: { description: 'a file of the build, or the app' } },
      errors: ['NOT_FOUND'],
      handler: ({ params: { path: segments }, http: { res } }) => new Promise<void>((resolve, reject) => {
        const next = (err?: unknown) => (err ? reject(err) : resolve());
        const isFile = segments.every((s) => FILE_SEGMENT.test(s)) && isBuiltFile(join(dir, ...segments));
        if (isFile) {
          const options = segments[0] === 'assets' ? ASSET_CACHE : { headers: { 'cache-control': 'no-cache' } };
          return res.sendFile(segments.join('/'), { root: dir, dotfiles: 'deny', ...options }, sent(res, next, resolve));
        }
        // An asset that is not there is a stale page asking for an old build: say so, not the app.
        if (segments[0] === 'assets') return next(new BatonError('NOT_FOUND', 'No such file in the run inspector build.'));
        sendIndex(dir, res, next, resolve);
      }),
    }),
  ];
}

function sendIndex(dir: string, res: Response, next: NextFunction, done: () => void = () => {}): void {
  if (!existsSync(join(dir, 'index.html'))) {
    return next(new BatonError('NOT_FOUND', 'The run inspector is not built: run `npm run build:ui`, then reload this page.'));
  }
  // Always revalidated, so a new build is picked up at the next load.
  res.sendFile('index.html', { root: dir, headers: { 'cache-control': 'no-cache' } }, sent(res, next, done));
}

/** After sendFile: a file gone since it was found (a build replacing dist/ui) is a 404 like any missing one. */
function sent(res: Response, next: NextFunction, done: () => void): (err?: Error) => void {
  return (err) => {
    if (!err || res.headersSent) return done();
    const status = (err as { status?: number }).status;
    next(status === 404 ? new BatonError('NOT_FOUND', 'The run inspector is being rebuilt; reload in a moment.') : err);
  };
}

function isBuiltFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}
