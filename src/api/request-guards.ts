import { isUtf8 } from 'node:buffer';
import type { NextFunction, Request, Response } from 'express';
import { BatonError } from '../lib/errors.ts';

/**
 * Checks on the raw request that run before anything reads or writes on its behalf: a
 * request refused here costs no JSON parse, no rate-limit token and no Redis command.
 */

/**
 * Headers whose value decides who is asking or what is read. Node keeps the first of two
 * `Authorization` headers and drops the other, so a proxy that appends its own could have
 * a request judged on a key nobody meant: two of them are refused instead of guessed at.
 */
const SINGLE_HEADERS = new Set(['authorization', 'content-type', 'last-event-id']);

/** Whether the request says a body follows (a length over zero, or a chunked body). */
export function carriesBody(req: Request): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

export function refuseRepeatedHeaders(req: Request, _res: Response, next: NextFunction): void {
  const seen = new Set<string>();
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (!SINGLE_HEADERS.has(name)) continue;
    if (seen.has(name)) {
      return next(new BatonError('VALIDATION_FAILED', undefined, [{ path: `headers.${name}`, message: 'sent more than once' }]));
    }
    seen.add(name);
  }
  next();
}

/**
 * The body-parser `verify` hook for JSON bodies: the raw bytes must be UTF-8 (RFC 8259; the
 * decoder would silently turn anything else into U+FFFD) and nest no deeper than `maxDepth`.
 * Both are one linear pass over the bytes before JSON.parse, so a body nested thousands deep
 * is refused before any recursive code (JSON.stringify, zod, Lua's cjson) can overflow on it.
 */
export function checkJsonBytes(maxDepth: number): (req: Request, res: Response, buf: Buffer) => void {
  return (_req, _res, buf) => {
    if (!isUtf8(buf)) {
      throw new BatonError('INVALID_JSON', undefined, [{ path: 'body', message: 'not valid UTF-8' }]);
    }
    if (nestingExceeds(buf, maxDepth)) {
      throw new BatonError('VALIDATION_FAILED', undefined, [
        { path: 'body', message: `nested deeper than ${maxDepth} levels of arrays and objects` },
      ]);
    }
  };
}

/**
 * Whether JSON text nests arrays and objects deeper than `max`. Brackets inside strings do
 * not count; UTF-8 continuation bytes are never ASCII, so scanning bytes is exact. Text that
 * is not JSON at all is left for the parser to refuse.
 */
export function nestingExceeds(buf: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i];
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next byte (\" and \\ among them)
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

/** Bytes of a body that may arrive before its rate is held against the minimum. */
const RATE_GRACE_MS = 2_000;

/**
 * A request body must keep arriving at `minBytesPerSec` on average from its headers on (the
 * first two seconds free), checked every second until it is complete; below that, 408 and
 * the connection closes. Counted on the socket, so it sees bytes whether or not a parser has
 * taken them yet, and it adds no 'data' listener that would change how the body is read.
 */
export function minimumBodyRate(minBytesPerSec: number) {
  return (req: Request, res: Response, next: NextFunction): void => {
    if (minBytesPerSec <= 0 || !carriesBody(req) || req.complete) return next();
    const socket = req.socket;
    const start = Date.now();
    const base = socket.bytesRead;
    const timer = setInterval(() => {
      if (req.complete || res.headersSent || socket.destroyed) return stop();
      const elapsed = Date.now() - start;
      const due = (minBytesPerSec * (elapsed - RATE_GRACE_MS)) / 1000;
      if (socket.bytesRead - base >= due) return;
      stop();
      // Answered here rather than through next(err): the body parser still waits on this
      // request and calls next itself once the connection is gone.
      res.status(408).set('connection', 'close').json({
        error: {
          code: 'REQUEST_TIMEOUT',
          message: `The request body arrived slower than ${minBytesPerSec} bytes per second.`,
          details: [{ path: 'body', message: 'arrived too slowly' }],
        },
      });
      res.once('finish', () => socket.destroy());
    }, 1_000);
    const stop = () => {
      clearInterval(timer);
      req.off('end', stop);
      res.off('close', stop);
    };
    req.once('end', stop);
    res.once('close', stop);
    next();
  };
}
