import type { Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { ApiGateway } from '../transitions/api-gateway.ts';
import { BatonError } from '../errors.ts';
import { newArtifactId } from '../ids.ts';
import { isValidId, type Keys } from '../keys.ts';
import type { ArtifactRef, ArtifactStore } from './artifact-store.ts';

/** What bounds a scope's uploads (see the variables in config.ts). */
export type ArtifactLimits = Pick<Config, 'RETENTION_MS' | 'ARTIFACT_SCOPE_MAX_BYTES' | 'ARTIFACT_UPLOAD_BYTES_PER_SEC' | 'ARTIFACT_UPLOAD_BURST_BYTES'>;

/**
 * The default artifact store: one hash per artifact under the scope's hash tag
 * (`artifact:<id>`: contentType, size, createdAt, runs, bytes).
 *
 * Lifetime: an upload expires RETENTION_MS after it was made, unless a run names it. The
 * submit transition then clears the expiry and counts the run in `runs`; the transition
 * that ends the run counts it out and, at zero, sets the expiry to RETENTION_MS again
 * (pinArtifacts / unpinArtifacts in transitions/lib/storage.lua). Both run in the scripts that create and
 * end the run, so an artifact can neither expire under a queued run nor outlive its last
 * run for longer than RETENTION_MS, whatever process dies in between.
 *
 * Quotas: a scope holds at most ARTIFACT_SCOPE_MAX_BYTES of artifacts at once, pinned ones
 * included, and uploads at most ARTIFACT_UPLOAD_BYTES_PER_SEC (a token bucket of bytes). The
 * write, both checks and the scope's ledger of what it holds are one transition
 * (transitions/artifact.lua), so concurrent uploads cannot pass the quota together. Another store
 * brings quotas of its own.
 */
export class RedisArtifactStore implements ArtifactStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly transitions: ApiGateway,
    private readonly limits: ArtifactLimits,
  ) {}

  /** Refuses with 429 ARTIFACT_QUOTA_EXCEEDED or ARTIFACT_RATE_LIMITED (nothing stored) past the scope's quotas. */
  async put(scope: string, upload: { contentType: string; bytes: Uint8Array }): Promise<ArtifactRef> {
    const l = this.limits;
    const ref: ArtifactRef = { id: newArtifactId(), contentType: upload.contentType, size: upload.bytes.byteLength, createdAt: Date.now() };
    const bytes = Buffer.from(upload.bytes.buffer, upload.bytes.byteOffset, upload.bytes.byteLength);
    const rate = l.ARTIFACT_UPLOAD_BYTES_PER_SEC;
    const reply = await this.transitions.scope(scope).storeArtifact({ ...ref, bytes }, {
      maxBytes: l.ARTIFACT_SCOPE_MAX_BYTES, limit: rate > 0 ? { rate, burst: l.ARTIFACT_UPLOAD_BURST_BYTES } : undefined,
    });
    if (reply.kind === 'rate-limited') {
      throw new BatonError('ARTIFACT_RATE_LIMITED', undefined, [
        { path: 'body', message: `${ref.size} bytes more than ARTIFACT_UPLOAD_BYTES_PER_SEC (${rate}) allows now; retry in ${reply.retryAfterMs} ms` },
      ], { retryAfterMs: reply.retryAfterMs });
    }
    if (reply.kind === 'over-quota') {
      const max = l.ARTIFACT_SCOPE_MAX_BYTES;
      // Larger than the whole quota: no wait helps.
      const alone = ref.size > max;
      throw new BatonError('ARTIFACT_QUOTA_EXCEEDED', undefined, [{
        path: 'body',
        message: alone
          ? `${ref.size} bytes is more than ARTIFACT_SCOPE_MAX_BYTES (${max})`
          : `the scope holds ${reply.held} bytes of artifacts; ${ref.size} more would pass ARTIFACT_SCOPE_MAX_BYTES (${max})`,
      }], { retryAfterMs: alone ? undefined : reply.retryAfterMs });
    }
    return ref;
  }

  async getRef(scope: string, id: string): Promise<ArtifactRef | undefined> {
    if (!isValidId(id)) return undefined;
    const [contentType, size, createdAt] = await this.redis.hmget(this.keys.scope(scope).artifact(id), 'contentType', 'size', 'createdAt');
    if (contentType === null) return undefined;
    return { id, contentType, size: Number(size), createdAt: Number(createdAt) };
  }

  async get(scope: string, id: string): Promise<Uint8Array | undefined> {
    if (!isValidId(id)) return undefined;
    return (await this.redis.hgetBuffer(this.keys.scope(scope).artifact(id), 'bytes')) ?? undefined;
  }
}
