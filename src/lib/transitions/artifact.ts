import type { ScriptCaller } from './caller.ts';
import { num, unexpected, type Replies } from './reply.ts';
import { Outcome } from './script-codes.ts';
import type { SubmitLimit } from './submit.ts';

/** An upload: stored, refused by the scope's upload rate, or refused by its quota (`held`: bytes the scope holds). */
export type ArtifactReply =
  | { kind: 'stored' }
  | { kind: 'rate-limited'; retryAfterMs: number }
  | { kind: 'over-quota'; held: number; retryAfterMs: number };

export const REPLY = {
  Stored: {}, Throttled: { held: num, retryAfterMs: num }, OverQuota: { held: num, retryAfterMs: num },
} satisfies Replies;

/**
 * Stores an uploaded artifact within its scope's quotas (artifact.lua): `maxBytes`
 * held at once (0: no quota), and the upload-rate bucket `limit` in bytes (absent: none).
 */
export async function storeArtifact(
  c: ScriptCaller, scope: string,
  a: { id: string; contentType: string; size: number; createdAt: number; bytes: Buffer },
  o: { maxBytes: number; limit?: SubmitLimit },
): Promise<ArtifactReply> {
  const sk = c.keys.scope(scope);
  // The bytes are the payload: ioredis sends a Buffer as it is, binary intact.
  const payload = [a.bytes as unknown as string];
  const reply = await c.call('artifact', REPLY, scope, {
    artifact: sk.artifact(a.id), ledger: sk.artifactLedger, stored: sk.artifactBytes, bucket: o.limit ? sk.artifactBucket : undefined,
  }, { id: a.id, contentType: a.contentType, size: a.size, createdAt: a.createdAt, maxBytes: o.maxBytes, limit: o.limit }, payload);
  if (reply.refused) return unexpected('artifact', reply.refused);
  switch (reply.code) {
    case Outcome.artifact.Stored: return { kind: 'stored' };
    case Outcome.artifact.Throttled: return { kind: 'rate-limited', retryAfterMs: reply.retryAfterMs };
    case Outcome.artifact.OverQuota: return { kind: 'over-quota', held: reply.held, retryAfterMs: reply.retryAfterMs };
    default: throw new Error(`the artifact script answered the unexpected code ${reply.code}`);
  }
}
