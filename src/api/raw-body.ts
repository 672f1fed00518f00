import type { Request } from 'express';
import { BatonError } from '../lib/errors.ts';

/**
 * Reads a raw request body of at most `limit` bytes. Never holds more than `limit`: a
 * declared Content-Length over it is refused before a byte is read, and a body that grows
 * past it while streaming is refused at that chunk. The rest of a refused body is read and
 * discarded rather than the socket being cut, so the client, still sending, gets the 413
 * instead of a connection reset.
 */
export function readRawBody(req: Request, limit: number): Promise<Buffer> {
  const tooLarge = () => new BatonError('PAYLOAD_TOO_LARGE', `The body is larger than ${limit} bytes.`);
  const encoding = String(req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  // The bytes are stored as sent; a compressed upload would be stored compressed, and its size
  // would say nothing about what it inflates to.
  if (encoding !== 'identity') {
    return Promise.reject(new BatonError('UNSUPPORTED_MEDIA_TYPE', 'Send the body without a Content-Encoding.'));
  }
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(tooLarge());
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) return void chunks.push(chunk);
      stop();
      chunks.length = 0;
      // No listener left: resuming discards the rest as it arrives.
      req.resume();
      reject(tooLarge());
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      stop();
      reject(err);
    };
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
  });
}
