import type { Logger } from '../lib/logger.ts';

/**
 * The one place that handles SIGTERM/SIGINT: closes everything in order (the closers
 * are idempotent), then exits. A second signal exits at once.
 */
export function onShutdown(log: Logger, closers: (() => Promise<void>)[]): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
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
