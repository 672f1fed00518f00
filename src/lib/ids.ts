import { randomBytes, randomFillSync } from 'node:crypto';

/**
 * Random bytes drawn from the system's CSPRNG a block at a time, as `crypto.randomUUID` does:
 * one call into it for every 256 run ids instead of one for each (the call was 1.6% of the
 * API's CPU in a profile of HTTP submits). Each byte is handed out once.
 */
const pool = Buffer.alloc(2048);
let used = pool.length;

function randomHex(bytes: number): string {
  if (used + bytes > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += bytes;
  return pool.toString('hex', used - bytes, used);
}

/** Run ids sort by creation time and carry 64 random bits: `r<time36><hex16>`. */
export function newRunId(): string {
  return `r${Date.now().toString(36)}${randomHex(8)}`;
}

/** A steering message's id when its submit gave none: `m<time36><hex16>`, as a run's. */
export function newMessageId(): string {
  return `m${Date.now().toString(36)}${randomHex(8)}`;
}

export function newWorkerId(runtime: string): string {
  return `${runtime}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** Artifact ids: `a<time36><hex16>`, 64 random bits like run ids (an id is all a submit needs to attach one). */
export function newArtifactId(): string {
  return `a${Date.now().toString(36)}${randomHex(8)}`;
}
