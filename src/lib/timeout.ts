/**
 * Settles with `p`, or with 'timeout' after `ms` (whichever is first); the timer never
 * outlives the race. `p` keeps running: callers use this to stop waiting, not to cancel.
 */
export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), ms); });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
