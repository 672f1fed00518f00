import type { Identity } from './api.ts';

/**
 * Where the inspector keeps its API key: sessionStorage, so the key lives as long as the tab
 * and never reaches a URL the server sees. A printed link may carry it in the fragment
 * (`/ui#key=...`, never sent to a server); it is taken from there once and removed from
 * the address bar and the history entry. A tab logged in already does not take a link's key
 * that would change its scope or role without asking (mustAsk).
 */
const STORAGE_KEY = 'baton.inspector.key';

/**
 * Whether a link's key would change what this tab shows: another scope, or another role in the
 * same scope. Such a key is used only once the reader agrees; a key of the same scope and role
 * (a key rotated, say) replaces the one in use without asking.
 */
export function mustAsk(current: Identity, offered: Identity): boolean {
  return current.scope !== offered.scope || current.role !== offered.role;
}

export function takeKeyFromFragment(loc: Location = location): string | undefined {
  if (!loc.hash.startsWith('#')) return undefined;
  const key = new URLSearchParams(loc.hash.slice(1)).get('key');
  if (key === null) return undefined;
  history.replaceState(history.state, '', loc.pathname + loc.search);
  return key.trim() || undefined;
}

export function storedKey(): string | undefined {
  try {
    return sessionStorage.getItem(STORAGE_KEY) ?? undefined;
  } catch {
    // Storage can be off (a locked-down browser): the key then lasts until the page reloads.
    return undefined;
  }
}

export function storeKey(key: string): void {
  try {
    sessionStorage.setItem(STORAGE_KEY, key);
  } catch {
    // See storedKey().
  }
}

export function forgetKey(): void {
  try {
    sessionStorage.removeItem(STORAGE_KEY);
  } catch {
    // See storedKey().
  }
}
