import { PermanentError } from '../sdk/errors.ts';

/**
 * Recall vectors as Redis stores them: float32, little-endian, scaled to unit length when
 * stored, so the cosine similarity of two of them is their dot product. Float32 halves
 * what float64 would cost in Redis memory and in every read, and loses nothing a
 * similarity ranking can tell apart.
 */

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** An embedder's vector scaled to unit length; a zero vector stays zero (it scores 0 against anything). */
export function unitVector(values: unknown): Float32Array {
  if (!Array.isArray(values) && !(values instanceof Float32Array)) {
    throw new PermanentError('recall: the embedder returned something that is not a vector', 'EMBEDDINGS_INVALID');
  }
  if (values.length === 0) throw new PermanentError('recall: the embedder returned an empty vector', 'EMBEDDINGS_INVALID');
  const out = new Float32Array(values.length);
  let norm = 0;
  for (let i = 0; i < values.length; i++) {
    const x = values[i];
    if (typeof x !== 'number' || !Number.isFinite(x)) {
      throw new PermanentError('recall: the embedder returned a vector with a value that is not a finite number', 'EMBEDDINGS_INVALID');
    }
    norm += x * x;
  }
  norm = Math.sqrt(norm);
  for (let i = 0; i < values.length; i++) out[i] = norm > 0 ? (values[i] as number) / norm : 0;
  return out;
}

export function encodeVector(v: Float32Array): Buffer {
  if (LITTLE_ENDIAN) return Buffer.from(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  const out = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) out.writeFloatLE(v[i], i * 4);
  return out;
}

export function decodeVector(bytes: Uint8Array): Float32Array {
  if (bytes.byteLength === 0 || bytes.byteLength % 4 !== 0) {
    throw new PermanentError(`recall: a stored vector of ${bytes.byteLength} bytes is not float32`, 'EMBEDDINGS_INVALID');
  }
  const n = bytes.byteLength / 4;
  if (LITTLE_ENDIAN) {
    // A Float32Array view needs a 4-byte aligned offset; a reply buffer slice may not have one.
    const aligned = bytes.byteOffset % 4 === 0 ? bytes : new Uint8Array(bytes);
    return new Float32Array(aligned.buffer, aligned.byteOffset, n);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

/**
 * Dot product of `query` and a stored vector, read in place: copying every unaligned reply
 * slice into a Float32Array first cost more than the arithmetic at 10,000 turns.
 */
export function dotStored(query: Float32Array, stored: Uint8Array): number {
  if (LITTLE_ENDIAN && stored.byteOffset % 4 === 0) return dot(query, decodeVector(stored));
  const view = new DataView(stored.buffer, stored.byteOffset, stored.byteLength);
  let s = 0;
  for (let i = 0; i < query.length; i++) s += query[i] * view.getFloat32(i * 4, true);
  return s;
}

/** Dot product of two vectors of the same length: their cosine similarity when both are unit vectors. */
export function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}
