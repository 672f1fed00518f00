import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../lib/logger.ts';
import { startLocalRedis, type LocalRedis } from './local-redis.ts';

/** The first restart comes at once; one that fails is tried again after 0.5 s, 1 s, 2 s … up to this. */
const RESTART_MAX_DELAY_MS = 30_000;

export interface SupervisedRedis {
  url: string;
  port: number;
  /** The pid of the redis-server serving now (a restart changes it). */
  readonly pid: number;
  /**
   * Stops supervising, then stops the redis-server this process started if one still runs
   * (idempotent). True when it stopped one; false when none of its own was running.
   */
  stop(): Promise<boolean>;
}

export interface SuperviseOptions {
  log: Logger;
  /** A restarted server is up: its pid (the `.baton/` lock names it for the next start). */
  onRestart?(pid: number): void;
}

/**
 * `baton start`'s redis-server, kept running: should it die (killed, out of memory, a crash),
 * it is started again at once on the same port and the same data folder, so every connection
 * reconnects to the same URL and finds the append-only file's data. One line says it died,
 * one says it is back (with how long it took); a restart that fails is logged and tried again
 * with a growing delay, for as long as Baton runs. The connections' own lines (redis.ts) say
 * when each lost Redis and had it back.
 *
 * Its own process group (startLocalRedis): a terminal's Ctrl-C reaches Baton only, which
 * stops it last, after the API and the worker drained.
 */
export async function superviseLocalRedis(dir: string, extraArgs: string[], o: SuperviseOptions): Promise<SupervisedRedis> {
  let current: LocalRedis = await startLocalRedis(dir, extraArgs, { ownProcessGroup: true });
  const port = current.port;
  const stopping = new AbortController();
  let restarting: Promise<void> | undefined;

  const restart = async (diedAt: number) => {
    for (let attempt = 1; !stopping.signal.aborted; attempt++) {
      try {
        const next = await startLocalRedis(dir, extraArgs, { ownProcessGroup: true, port });
        // Stopped while it started: it is not wanted any more.
        if (stopping.signal.aborted) return void await next.stop();
        current = next;
        watch(next);
        // The lock names the new server before the line says it is back: whoever reads the line
        // (a person, a script) finds the lock already true.
        o.onRestart?.(next.process.pid!);
        o.log.warn({ redisPid: next.process.pid, port, attempt, downMs: Date.now() - diedAt }, 'local redis-server back');
        return;
      } catch (err) {
        const retryInMs = Math.min(RESTART_MAX_DELAY_MS, 500 * 2 ** (attempt - 1));
        o.log.error({ port, attempt, retryInMs, err: (err as Error).message }, 'local redis-server did not restart');
        await sleep(retryInMs, undefined, { signal: stopping.signal }).catch(() => {});
      }
    }
  };
  const watch = (r: LocalRedis) => {
    r.process.once('exit', (code, signal) => {
      if (stopping.signal.aborted) return;
      o.log.error({ redisPid: r.process.pid, port, code, signal }, 'local redis-server died; starting it again on the same data');
      restarting = restart(Date.now()).finally(() => { restarting = undefined; });
    });
  };
  watch(current);

  let stopped: Promise<boolean> | undefined;
  return {
    url: current.url,
    port,
    get pid() { return current.process.pid!; },
    stop() {
      stopped ??= (async () => {
        stopping.abort();
        await restarting;
        const running = current.process.exitCode === null && current.process.signalCode === null;
        await current.stop();
        return running;
      })();
      return stopped;
    },
  };
}
