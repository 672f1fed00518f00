import { useEffect, useRef, useState } from 'preact/hooks';

/** The current time, updated every `everyMs` (for countdowns and "ago" labels). */
export function useNow(everyMs = 1000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(t);
  }, [everyMs]);
  return now;
}

export interface Polled<T> {
  data?: T;
  error?: unknown;
  /** Fetch again now (after an action), without waiting for the next tick. */
  refresh(): void;
  /**
   * Show `data` now (an action's answer, newer than anything polled so far): a poll already
   * under way when it arrives is dropped, so an older answer never replaces it.
   */
  replace(data: T): void;
}

/**
 * Calls `load` now and every `everyMs` while the page is visible, one call at a time (a slow
 * API is never asked twice at once). `deps` change: start over with the new inputs.
 */
export function usePolling<T>(load: () => Promise<T>, everyMs: number, deps: unknown[]): Polled<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown }>({});
  const tick = useRef<() => void>(() => {});
  const generation = useRef(0);
  useEffect(() => {
    let stopped = false;
    let running = false;
    let again = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      clearTimeout(timer);
      if (running) {
        again = true;
        return;
      }
      running = true;
      const asked = generation.current;
      try {
        const data = await load();
        if (!stopped && asked === generation.current) setState({ data });
      } catch (error) {
        if (!stopped && asked === generation.current) setState((s) => ({ data: s.data, error }));
      } finally {
        running = false;
        if (!stopped) {
          if (again) {
            again = false;
            void run();
          } else {
            timer = setTimeout(schedule, everyMs);
          }
        }
      }
    };
    // A hidden tab does not poll; it catches up as soon as it is shown.
    const schedule = () => {
      if (document.hidden) timer = setTimeout(schedule, everyMs);
      else void run();
    };
    const onVisible = () => {
      if (!document.hidden) void run();
    };
    tick.current = () => void run();
    setState({});
    void run();
    document.addEventListener('visibilitychange', onVisible);
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisible);
    };
  }, deps);
  const replace = (data: T) => {
    generation.current++;
    setState({ data });
  };
  return { ...state, refresh: () => tick.current(), replace };
}
