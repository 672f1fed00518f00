import type { Logger } from '../lib/logger.ts';

/**
 * Past the shutdown grace (in-flight runs finishing, then the hand-over), this much more for
 * closing connections and servers before the process exits anyway.
 */
const CLOSE_MARGIN_MS = 10_000;

/**
 * The same signal again this soon after the first is the same request: `npm start` forwards
 * the terminal's Ctrl-C to a process that got it from the terminal already.
 */
const ECHO_MS = 1_000;

export interface ShutdownOptions {
  /** SIGHUP (the terminal closed) shuts down too; otherwise it keeps its default. */
  hangup?: boolean;
}

/**
 * The one place that handles SIGTERM/SIGINT: closes everything in order (the closers are
 * idempotent, and read when the signal comes, so a start can add them as it goes), then
 * exits 0. A second signal exits at once (1), and so does a shutdown still going after
 * `graceMs` + 10 s: a closer waiting on a Redis that stopped answering must not keep the
 * process, and whatever holds its output, alive for ever. Leases not handed over by then
 * expire as after a crash.
 */
export function onShutdown(
  log: Logger, closers: (() => Promise<void>)[], graceMs: number, o: ShutdownOptions = {},
): { readonly stopping: boolean } {
  let first: { signal: string; at: number } | undefined;
  const stop = (signal: string) => {
    if (first) {
      if (signal === first.signal && Date.now() - first.at < ECHO_MS) return;
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    first = { signal, at: Date.now() };
    log.info({ signal }, 'shutting down');
    const deadlineMs = graceMs + CLOSE_MARGIN_MS;
    setTimeout(() => {
      log.error({ deadlineMs }, 'shutdown did not finish in time; exiting now');
      process.exit(1);
    }, deadlineMs).unref();
    void (async () => {
      for (const close of closers) {
        try {
          await close();
        } catch (err) {
          log.error({ err: (err as Error).message }, 'error during shutdown');
        }
      }
      process.exit(0);
    })();
  };
  for (const signal of ['SIGTERM', 'SIGINT', ...(o.hangup ? ['SIGHUP'] : [])] as NodeJS.Signals[]) {
    process.on(signal, () => stop(signal));
  }
  return { get stopping() { return first !== undefined; } };
}
