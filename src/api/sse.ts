import type { Request, Response } from 'express';
import type { RunEvent } from '../lib/streams/log.ts';
import type { RunStreams } from '../lib/streams/run-streams.ts';

export interface SseOptions {
  keepAliveMs: number;
  /** Suggested reconnect delay sent as `retry:`. */
  retryMs: number;
  maxBufferBytes: number;
  /** SSE_STALL_MS: a reader that takes no byte for this long while bytes wait for it is disconnected. */
  stallMs: number;
  /** Ends the stream when it aborts (its key was revoked). */
  signal?: AbortSignal;
  /**
   * Ends the stream for a reconnect when it aborts (the API process is shutting down): a
   * comment and `retry:`, then the end of the response, with no `end` event, so the reader
   * resumes from its Last-Event-ID (an EventSource after `retry` ms, the typed client at once).
   */
  handOver?: AbortSignal;
  /** The stream's status (200) and more headers: a submit that streams answers 202 and names its run. */
  status?: number;
  headers?: Record<string, string>;
  /**
   * Writes events in another protocol than Baton's own SSE (the AI SDK's UI message stream,
   * chat-stream.ts; OpenAI's events, routes-openai.ts): its head once the stream opened, then
   * each batch as it encodes it, then its trailer after the run's last event.
   */
  encoder?: EventEncoder;
  /** The stream opened. onClose follows once, when its connection has closed. */
  onOpen?(): void;
  onClose?(): void;
}

/** A protocol's framing of a run's events; see SseOptions.encoder. */
export interface EventEncoder {
  /** Written once the stream opened, before the first event. */
  head?(): string;
  /** The text for a batch of events, and whether the response ends after it (before the run's `end`). */
  encode(events: RunEvent[]): { text: string; done: boolean };
  /** Written after the run's last event, before the response ends (`data: [DONE]`). */
  trailer?: string;
}

/** Largest single write, in characters (see write()). */
const WRITE_PIECE = 16 * 1024;

/**
 * Serves a run's events as Server-Sent Events: replay after `afterId`, then live, each
 * event once and in order (see EventFollower for the hand-off). The response ends after the
 * `end` event; a reader that already has it gets 204 (an EventSource then stops
 * reconnecting). When the API process shuts down, the response ends without `end`, after a
 * comment and `retry:` (handOver): the reader resumes from its Last-Event-ID. Closing the
 * response never touches the run.
 *
 * Memory per reader is bounded: replay pages are bounded in bytes and go out in slices, each
 * once the socket took the one before (a reader that stops reading holds the slice it did not
 * take, not the rest of its page: see EventFollower); a reader more than `maxBufferBytes` behind on live events is
 * disconnected; and a reader that takes no byte for `stallMs` while bytes wait for it is
 * disconnected, also after the response ended (a reader that never reads would otherwise
 * hold its unsent tail forever). Each resumes from its Last-Event-ID. The stream counts as
 * open (onOpen .. onClose) until its connection has closed, not until the last write.
 */
export async function serveEvents(
  req: Request, res: Response, streams: RunStreams,
  target: { scope: string; runId: string; afterId: string; fresh?: boolean }, o: SseOptions,
): Promise<void> {
  let writing = true;
  let keepAlive: NodeJS.Timeout | undefined;
  // Bytes handed to the response, and the most of them seen to have left Node's buffers.
  let sent = 0;
  let flushed = 0;
  let progressAt = Date.now();
  // In pieces: Node counts a write as pending until all of it left, so progress through one
  // event of megabytes would only show at its end, and a reader taking it slowly but surely
  // would look stalled. A chunk of more than one piece is encoded once and its pieces are
  // views of that buffer (as are those of data read from the log as bytes): a string piece
  // the socket could not take at once is held twice (the string, kept by the write request,
  // and the copy Node hands the kernel), which for a reader that stopped reading was its
  // whole last slice twice over.
  const writeBytes = (bytes: Buffer) => {
    for (let at = 0; at < bytes.length; at += WRITE_PIECE) {
      const piece = bytes.length <= WRITE_PIECE ? bytes : bytes.subarray(at, at + WRITE_PIECE);
      sent += piece.length;
      res.write(piece);
    }
  };
  const write = (chunk: string) => {
    if (chunk === '') return;
    if (chunk.length > WRITE_PIECE) return writeBytes(Buffer.from(chunk));
    sent += Buffer.byteLength(chunk);
    res.write(chunk);
  };
  // A connection dropped on purpose is reset, not closed: a close would leave the unsent tail
  // in the kernel's buffers for as long as the peer does not read (minutes of retransmits).
  const drop = () => {
    const socket = res.socket;
    if (socket && !socket.destroyed) socket.resetAndDestroy();
    else res.destroy();
  };
  const finish = (how: 'end' | 'destroy') => {
    if (!writing) {
      if (how === 'destroy') drop();
      return;
    }
    writing = false;
    clearInterval(keepAlive);
    if (follower !== 'ended') void follower.stop();
    if (how === 'end') res.end();
    else drop();
  };
  const revoked = () => finish('destroy');
  const handedOver = () => {
    if (!writing) return;
    write(`: this API process is stopping; resume with Last-Event-ID\nretry: ${o.retryMs}\n\n`);
    finish('end');
  };

  // `fresh`: a submit streaming the run it just made (RunStreams.open).
  const follower = await streams.open(target.scope, target.runId, target.afterId, {
    deliver(events: RunEvent[]) {
      if (!writing) return;
      // Still more than the limit unsent when the next batch comes: the reader is not keeping
      // up. (Checked before writing, so one large batch alone never cuts a healthy reader.)
      if (res.writableLength > o.maxBufferBytes) return finish('destroy');
      if (o.encoder) {
        const { text, done } = o.encoder.encode(events);
        write(text);
        if (done) finish('end');
        return;
      }
      // Text is gathered into one chunk; data read as bytes (large) goes out as it is, uncopied.
      let chunk = '';
      for (const e of events) {
        chunk += `id: ${e.id}\nevent: ${e.type}\ndata: `;
        if (typeof e.data === 'string') {
          chunk += e.data;
        } else {
          write(chunk);
          chunk = '';
          writeBytes(e.data);
        }
        chunk += '\n\n';
      }
      write(chunk);
    },
    writable() {
      // Only a write that went past the response's high-water mark gets a 'drain' (the mark
      // is 16 KiB on Node 20 and 64 KiB from Node 22 on): waiting on a fixed size instead
      // waited for ever on Node 22 once between the two.
      return writing && res.writableNeedDrain ? drainedOrClosed(res) : undefined;
    },
    pending: () => (writing ? res.writableLength : 0),
    onEnd: () => {
      if (writing && o.encoder?.trailer) write(o.encoder.trailer);
      finish('end');
    },
    // Redis went away mid-stream: drop the connection so the client resumes by id elsewhere.
    onError: () => finish('destroy'),
  }, { fresh: target.fresh });
  if (follower === 'ended') return void res.status(204).end();

  res.status(o.status ?? 200).set({
    ...o.headers,
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  write(`retry: ${o.retryMs}\n\n`);
  if (o.encoder?.head) write(o.encoder.head());
  o.onOpen?.();
  keepAlive = setInterval(() => write(': keep-alive\n\n'), o.keepAliveMs);
  // Progress is bytes leaving Node's buffers for the socket. Chunk framing makes the pending
  // count run a little ahead of `sent`, so nothing leaving never looks like progress.
  const watch = setInterval(() => {
    const pending = res.writableLength;
    const out = sent - pending;
    if (pending === 0 || out > flushed) {
      flushed = Math.max(flushed, out);
      progressAt = Date.now();
    } else if (Date.now() - progressAt >= o.stallMs) {
      finish('destroy');
    }
  }, Math.max(50, Math.floor(o.stallMs / 4)));
  // `res` 'close' fires when the connection is gone (client away, destroyed, or done after the end).
  res.once('close', () => {
    clearInterval(watch);
    o.signal?.removeEventListener('abort', revoked);
    o.handOver?.removeEventListener('abort', handedOver);
    finish('end');
    o.onClose?.();
  });
  o.signal?.addEventListener('abort', revoked, { once: true });
  o.handOver?.addEventListener('abort', handedOver, { once: true });
  // The connection went before 'close' was listened for. (Not req.destroyed: a request whose
  // body was read, a submit's, is destroyed once read, with its connection still open.)
  if (!res.socket || res.socket.destroyed || o.signal?.aborted) return finish('destroy');
  if (o.handOver?.aborted) return handedOver();
  await follower.start();
}

/** Resolves on the response's next 'drain' or 'close', leaving no listener behind either way. */
function drainedOrClosed(res: Response): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
