import { randomBytes } from 'node:crypto';

/** Run ids sort by creation time and carry 64 random bits: `r<time36><hex16>`. */
export function newRunId(): string {
  return `r${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
}

export function newWorkerId(runtime: string): string {
  return `${runtime}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** Artifact ids: `a<time36><hex16>`, 64 random bits like run ids (an id is all a submit needs to attach one). */
export function newArtifactId(): string {
  return `a${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
}
