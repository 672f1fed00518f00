import { useEffect, useState } from 'preact/hooks';

/** The inspector's views, addressed by path under `<api>/ui`. */
export type Route =
  | { view: 'runs' }
  | { view: 'run'; runId: string }
  | { view: 'session'; sessionId: string }
  | { view: 'runtimes' }
  | { view: 'schedules' }
  /** A scope's limits: the key's own scope, or (`/limits/<scope>`) the one an operator key picked. */
  | { view: 'limits'; scope?: string }
  | { view: 'missing'; path: string };

/**
 * `<api>/ui/` as a full URL: the <base href> the API writes into every page of the app, so it
 * holds under any path the API is mounted at or a proxy puts in front of it. A page without
 * one was not served by the API, and nothing it would fetch could be trusted to be there.
 */
export function uiRoot(doc: Document = document): string {
  if (!doc.querySelector('base[href]')) throw new Error('the run inspector must be served by the Baton API (its page has no <base>)');
  return new URL('.', doc.baseURI).href;
}

/** `<api>/ui`, the path the app's own links start with. */
export function uiBase(doc: Document = document): string {
  return new URL(uiRoot(doc)).pathname.replace(/\/$/, '');
}

export function parseRoute(pathname: string, base = uiBase()): Route {
  const rest = pathname.startsWith(base) ? pathname.slice(base.length) : pathname;
  const parts = rest.split('/').filter(Boolean).map(safeDecode);
  if (parts.length === 0 || (parts.length === 1 && parts[0] === 'runs')) return { view: 'runs' };
  if (parts.length === 2 && parts[0] === 'runs') return { view: 'run', runId: parts[1] };
  if (parts.length === 2 && parts[0] === 'sessions') return { view: 'session', sessionId: parts[1] };
  if (parts.length === 1 && parts[0] === 'runtimes') return { view: 'runtimes' };
  if (parts.length === 1 && parts[0] === 'schedules') return { view: 'schedules' };
  if (parts.length === 1 && parts[0] === 'limits') return { view: 'limits' };
  if (parts.length === 2 && parts[0] === 'limits') return { view: 'limits', scope: parts[1] };
  return { view: 'missing', path: rest };
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The href of a view: `href('runs', id)` -> `<api>/ui/runs/<id>`. */
export function href(...parts: string[]): string {
  return [uiBase(), ...parts.map(encodeURIComponent)].join('/');
}

const listeners = new Set<() => void>();

/** Moves to another view of the app without a page load. */
export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  for (const l of listeners) l();
}

/** The current path and query; re-renders on navigate() and on the browser's back/forward. */
export function useLocation(): { pathname: string; search: string } {
  const read = () => ({ pathname: location.pathname, search: location.search });
  const [loc, setLoc] = useState(read);
  useEffect(() => {
    const update = () => setLoc(read());
    listeners.add(update);
    addEventListener('popstate', update);
    return () => {
      listeners.delete(update);
      removeEventListener('popstate', update);
    };
  }, []);
  return loc;
}

/**
 * Click handler for the app's own links: a plain left click navigates inside the app; a
 * modified click (new tab, download) is left to the browser.
 */
export function onLinkClick(e: MouseEvent): void {
  const a = e.currentTarget as HTMLAnchorElement;
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (a.origin !== location.origin) return;
  e.preventDefault();
  navigate(a.pathname + a.search);
}
