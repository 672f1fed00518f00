import { once } from 'node:events';
import type { Request, Response } from 'express';
import type { RunEvent } from '../lib/streams/log.ts';
import type { RunStreams } from '../lib/streams/run-streams.ts';

export interface SseOptions {
  keepAliveMs: number;
  /** Suggested reconnect delay sent as `retry:`. */
  retryMs: number;
  maxBufferBytes: number;
  onOpen?(): void;
  onClose?(): void;
}

/** A replay page is written only once the socket took the previous one (bytes). */
const REPLAY_HIGH_WATER = 64 * 1024;

/**
 * Serves a run's events as Server-Sent Events: replay after `afterId`, then live, each
 * event once and in order (see EventFollower for the hand-off). The response ends after the
 * `end` event; a reader that already has it gets 204 (an EventSource then stops
 * reconnecting). A reader that falls more than `maxBufferBytes` behind on live events is
 * disconnected instead of buffered without bound; it resumes from its Last-Event-ID.
 * Closing the response never touches the run.
 */
export async function serveEvents(
  req: Request, res: Response, streams: RunStreams, target: { scope: string; runId: string; afterId: string }, o: SseOptions,
): Promise<void> {
  let closed = false;
  let keepAlive: NodeJS.Timeout | undefined;
  const finish = (how: 'end' | 'destroy') => {
    if (closed) return;
    closed = true;
    clearInterval(keepAlive);
    if (follower !== 'ended') void follower.stop();
    o.onClose?.();
    if (how === 'end') res.end();
    else res.destroy();
  };

  const follower = await streams.open(target.scope, target.runId, target.afterId, {
    deliver(events: RunEvent[]) {
      if (closed) return;
      // Still more than the limit unsent when the next batch comes: the reader is not keeping
      // up. (Checked before writing, so one large batch alone never cuts a healthy reader.)
      if (res.writableLength > o.maxBufferBytes) return finish('destroy');
      let chunk = '';
      for (const e of events) chunk += `id: ${e.id}\nevent: ${e.type}\ndata: ${e.data}\n\n`;
      res.write(chunk);
    },
    async writable() {
      if (!closed && res.writableLength > REPLAY_HIGH_WATER) await Promise.race([once(res, 'drain'), once(res, 'close')]);
    },
    onEnd: () => finish('end'),
    // Redis went away mid-stream: drop the connection so the client resumes by id elsewhere.
    onError: () => finish('destroy'),
  });
  if (follower === 'ended') return void res.status(204).end();

  res.status(200).set({
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  res.write(`retry: ${o.retryMs}\n\n`);
  o.onOpen?.();
  keepAlive = setInterval(() => res.write(': keep-alive\n\n'), o.keepAliveMs);
  // `res` 'close' fires when the client goes away (or after we end): stop following.
  res.on('close', () => finish('end'));
  if (req.destroyed) return finish('end');
  await follower.start();
}
