/**
 * Hooks are objects of optional methods that return nothing (ExecutorEvents, RunStoreEvents,
 * the sweeper's events): a part of the process tells them what happened, and metrics or a
 * test listen. Several listeners of one kind compose into one object of that kind, so the
 * part that emits them takes a single hooks object whatever the number of listeners.
 */
type Listener = object;

/**
 * One hooks object that calls, for each of its methods, that method of every listener which
 * has it, in the order given. Missing listeners (undefined) are skipped; one listener is
 * returned as it is. A listener's own methods are called with the listener as `this`.
 */
export function composeHooks<T extends Listener>(...listeners: (T | undefined)[]): T {
  const present = listeners.filter((l): l is T => l !== undefined);
  if (present.length === 1) return present[0];
  const names = new Set(present.flatMap((l) => methodNames(l)));
  const composed: Record<string, (...args: unknown[]) => void> = {};
  for (const name of names) {
    const calls = present.flatMap((l) => {
      const fn = (l as Record<string, unknown>)[name];
      return typeof fn === 'function' ? [{ l, fn: fn as (...args: unknown[]) => void }] : [];
    });
    composed[name] = (...args) => {
      for (const { l, fn } of calls) fn.apply(l, args);
    };
  }
  return composed as T;
}

/** A listener's method names, its class's included (a hooks object may be a class instance). */
function methodNames(l: Listener): string[] {
  const names = new Set<string>();
  for (let o: object | null = l; o && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
    for (const name of Object.getOwnPropertyNames(o)) {
      if (name !== 'constructor' && typeof (l as Record<string, unknown>)[name] === 'function') names.add(name);
    }
  }
  return [...names];
}
