import { readFile } from 'node:fs/promises';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NextFunction, Request, Response } from 'express';
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

/**
 * A view's query string is the app's own: the runs list keeps its filter there, so a link to
 * `/ui/runs?status=failed` shares it. The server passes it on unread (the app checks each value
 * and ignores what it does not know); only its shape is checked, a value or a repeated one.
 */
const viewQuery = z.record(z.string(), z.union([z.string(), z.array(z.string())]))
  .describe("the view's own state, read by the app (the runs list's status, sessionId, agent, runtime)");

/** Hashed assets never change under their name; a new build gives new names. */
const ASSET_CACHE = { maxAge: '365d', immutable: true } as const;

/**
 * The run inspector, a single-page app that talks to the public API like any client:
 * `/` redirects to `/ui`, files of the build are served as they are, and every other
 * `/ui/...` path is one of the app's own views, answered with its index.html. Without a
 * build it answers a 404 that says how to make one, instead of failing.
 *
 * Nothing in it names the path it is served under: the API may be mounted anywhere in a host
 * app (`app.use('/agents', baton.router)`) or sit behind a proxy that adds a prefix. The build
 * refers to its files relatively (`./assets/...`), and the index.html of every view gets a
 * `<base href>` that leads from the view's address back to `<api>/ui/`, relative too, so
 * the browser resolves the files, and the app finds the API, from the address it sees.
 */
export function uiRoutes(dir = BUILT_UI): RouteSpec[] {
  return [
    route({
      method: 'get', path: '/', summary: 'Redirects to the run inspector.', access: 'public',
      ok: { 302: { description: 'to /ui' } },
      handler: ({ http: { req } }) => ({ status: 302, headers: { location: toUi(req) } }),
    }),
    route({
      method: 'get', path: '/ui', summary: 'The run inspector, a single-page app (log in with an API key).', access: 'public',
      query: viewQuery,
      ok: { 200: { description: 'the app', schema: z.string(), contentType: 'text/html' } },
      errors: ['NOT_FOUND'],
      handler: ({ http: { req, res } }) => sendIndex(dir, req, res),
    }),
    route({
      method: 'get', path: '/ui/*path', summary: "The run inspector's files; any other path is one of its views (its index.html).",
      access: 'public',
      // Express 5 hands a wildcard over as its segments.
      params: z.strictObject({ path: z.array(z.string()).describe('a file of the build, or a view such as runs/{runId}') }),
      query: viewQuery,
      ok: { 200: { description: 'a file of the build, or the app' } },
      errors: ['NOT_FOUND'],
      handler: ({ params: { path: segments }, http: { req, res } }) => {
        // index.html is the app, with the <base> its address needs, whichever path asks for it.
        const isFile = segments.every((s) => FILE_SEGMENT.test(s)) && segments.join('/') !== 'index.html' && isBuiltFile(join(dir, ...segments));
        if (isFile) {
          return new Promise<void>((resolve, reject) => {
            const options = segments[0] === 'assets' ? ASSET_CACHE : { headers: { 'cache-control': 'no-cache' } };
            res.sendFile(segments.join('/'), { root: dir, dotfiles: 'deny', ...options }, sent(res, (err) => (err ? reject(err) : resolve()), resolve));
          });
        }
        // An asset that is not there is a stale page asking for an old build: say so, not the app.
        if (segments[0] === 'assets') throw new BatonError('NOT_FOUND', 'No such file in the run inspector build.');
        return sendIndex(dir, req, res);
      },
    }),
  ];
}

/** The app's index.html, its <base> set for the address it was asked for. */
async function sendIndex(dir: string, req: Request, res: Response): Promise<void> {
  let html: string;
  try {
    html = await readFile(join(dir, 'index.html'), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    throw new BatonError('NOT_FOUND', 'The run inspector is not built: run `npm run build:ui`, then reload this page.');
  }
  const head = /<head(\s[^>]*)?>/i.exec(html);
  if (!head) throw new Error(`${join(dir, 'index.html')} has no <head>: not a build of the run inspector`);
  const at = head.index + head[0].length;
  const page = `${html.slice(0, at)}\n    <base href="${baseHref(req.path)}" />${html.slice(at)}`;
  // Always revalidated, so a new build is picked up at the next load.
  res.status(200).set({ 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-cache' }).send(page);
}

/**
 * The way from the address of a view (`path`, where the router was mounted: `/ui`, `/ui/`,
 * `/ui/runs/r1`) back to the app's folder `<api>/ui/`, as a relative URL: it holds under any
 * mount path and any prefix a proxy adds, which the API cannot see. The address's own path
 * segments are counted as the browser counts them (`req.path` is not decoded).
 */
export function baseHref(path: string): string {
  if (path === '/ui') return 'ui/';
  const rest = path.slice('/ui'.length);
  const depth = rest.split('/').length - 2;
  return depth > 0 ? '../'.repeat(depth) : './';
}

/**
 * Where `/` sends the browser: `ui` beside it, relative for the same reason as baseHref. The
 * mount point itself may be asked for without its trailing slash (`/agents`), and `ui`
 * beside that would be `/ui`: the last segment of the address is repeated then.
 */
function toUi(req: Request): string {
  const path = req.originalUrl.split('?')[0];
  if (path.endsWith('/')) return 'ui';
  return `${path.slice(path.lastIndexOf('/') + 1)}/ui`;
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
