import type { Logger } from '../lib/logger.ts';

/**
 * Past the shutdown grace (in-flight runs finishing, then the hand-over), this much more for
 * closing connections and servers before the process exits anyway.
 */
const CLOSE_MARGIN_MS = 10_000;

/**
 * The one place that handles SIGTERM/SIGINT: closes everything in order (the closers
 * are idempotent), then exits. A second signal exits at once, and so does a shutdown still
 * going after `graceMs` + 10 s: a closer waiting on a Redis that is gone (a terminal's Ctrl-C
 * also stops the redis-server `baton start` spawned) must not keep the process, and whatever
 * holds its output, alive for ever. Leases not handed over by then expire as after a crash.
 */
export function onShutdown(log: Logger, closers: (() => Promise<void>)[], graceMs: number): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
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
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
