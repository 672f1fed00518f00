import type { Request, Response } from 'express';
import type { Redis } from 'ioredis';
import type { EventHub } from '../lib/event-hub.ts';
import { compareIds, readEvents, type RunEvent } from '../lib/event-log.ts';
import type { Keys } from '../lib/keys.ts';

export interface SseOptions {
  redis: Redis;
  keys: Keys;
  hub: EventHub;
  scope: string;
  runId: string;
  afterId: string;
  keepAliveMs: number;
  maxBufferBytes: number;
  onOpen?(): void;
  onClose?(): void;
}

/**
 * Serves a run's events: replay from the log after `afterId`, then live, each event once
 * and in order. The channel is subscribed *before* the replay is read, and live events
 * that arrive meanwhile are held back and de-duplicated by id, so the hand-off from replay
 * to live has neither a gap nor a duplicate. After a subscriber reconnect the log is read
 * again from the last id sent. The response ends after the `end` event.
 */
export async function serveEvents(req: Request, res: Response, o: SseOptions): Promise<void> {
  let lastSent = o.afterId;
  let replaying = true;
  let held: RunEvent[] = [];
  let closed = false;
  let catchUp: Promise<void> | undefined;

  res.status(200).set({
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  res.write('retry: 1000\n\n');
  o.onOpen?.();

  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(keepAlive);
    void unsubscribe?.();
    o.onClose?.();
    res.end();
  };

  const send = (events: RunEvent[]) => {
    for (const e of events) {
      if (closed) return;
      if (lastSent !== '0' && compareIds(e.id, lastSent) <= 0) continue;
      res.write(`id: ${e.id}\nevent: ${e.type}\ndata: ${e.data}\n\n`);
      lastSent = e.id;
      if (e.type === 'end') return close();
    }
    // A reader this far behind is cut off instead of buffered without bound; it resumes by id.
    if (res.writableLength > o.maxBufferBytes) {
      closed = true;
      clearInterval(keepAlive);
      void unsubscribe?.();
      o.onClose?.();
      res.destroy();
    }
  };

  /** Reads the log from the last id sent until it is exhausted. */
  const readLog = async () => {
    for (;;) {
      const page = await readEvents(o.redis, o.keys, o.scope, o.runId, lastSent);
      if (closed) return;
      send(page);
      if (page.length < 1000 || closed) return;
    }
  };

  const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), o.keepAliveMs);
  req.on('close', close);

  let unsubscribe: (() => Promise<void>) | undefined;
  unsubscribe = await o.hub.subscribe(o.keys.scope(o.scope).channel(o.runId), {
    events(events) {
      if (replaying || catchUp) held.push(...events);
      else send(events);
    },
    resync() {
      if (closed) return;
      catchUp = readLog().finally(() => {
        catchUp = undefined;
        const h = held;
        held = [];
        send(h);
      });
    },
  });
  if (closed) return void (await unsubscribe());

  try {
    await readLog();
  } catch (err) {
    close();
    throw err;
  }
  replaying = false;
  const h = held;
  held = [];
  send(h);
}
