import type { RunEvent } from './log.ts';
import type { RunStreams } from './run-streams.ts';

/**
 * Follows a run's events from the start (replay, then live) into `deliver` until its `end`:
 * what an answer that is not streamed waits on. Rejects when `signal` aborts: the client
 * left, and the run goes on without it.
 */
export async function followToEnd(
  streams: RunStreams, scope: string, runId: string, o: { fresh: boolean; signal: AbortSignal }, deliver: (events: RunEvent[]) => void,
): Promise<void> {
  let settle!: { resolve(): void; reject(err: unknown): void };
  const ended = new Promise<void>((resolve, reject) => { settle = { resolve, reject }; });
  // Awaited below, once the replay started: a rejection before then is not unhandled.
  ended.catch(() => undefined);
  const follower = await streams.open(scope, runId, '0', {
    deliver, onEnd: () => settle.resolve(), onError: (err) => settle.reject(err),
  }, { fresh: o.fresh });
  if (follower === 'ended') return;
  const gone = () => {
    void follower.stop();
    settle.reject(o.signal.reason);
  };
  if (o.signal.aborted) gone();
  else o.signal.addEventListener('abort', gone, { once: true });
  try {
    await follower.start();
    await ended;
  } finally {
    o.signal.removeEventListener('abort', gone);
  }
}
