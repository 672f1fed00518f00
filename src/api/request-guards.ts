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
