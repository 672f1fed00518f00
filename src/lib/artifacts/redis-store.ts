import type { Redis } from 'ioredis';
import { newArtifactId } from '../ids.ts';
import { isValidId, type Keys } from '../keys.ts';
import type { ArtifactRef, ArtifactStore } from './artifact-store.ts';

/**
 * The default artifact store: one hash per artifact under the scope's hash tag
 * (`artifact:<id>`: contentType, size, createdAt, runs, bytes).
 *
 * Lifetime: an upload expires RETENTION_MS after it was made, unless a run names it. The
 * submit transition then clears the expiry and counts the run in `runs`; the transition
 * that ends the run counts it out and, at zero, sets the expiry to RETENTION_MS again
 * (pinArtifacts / unpinArtifacts in lua/lib.lua). Both run in the scripts that create and
 * end the run, so an artifact can neither expire under a queued run nor outlive its last
 * run for longer than RETENTION_MS, whatever process dies in between.
 */
export class RedisArtifactStore implements ArtifactStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly retentionMs: number,
  ) {}

  async put(scope: string, upload: { contentType: string; bytes: Uint8Array }): Promise<ArtifactRef> {
    const id = newArtifactId();
    const key = this.keys.scope(scope).artifact(id);
    const ref: ArtifactRef = { id, contentType: upload.contentType, size: upload.bytes.byteLength, createdAt: Date.now() };
    const bytes = Buffer.from(upload.bytes.buffer, upload.bytes.byteOffset, upload.bytes.byteLength);
    // One MULTI: the hash never exists without its expiry.
    const replies = await this.redis.multi()
      .hset(key, 'contentType', ref.contentType, 'size', ref.size, 'createdAt', ref.createdAt, 'runs', 0, 'bytes', bytes)
      .pexpire(key, this.retentionMs)
      .exec();
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error('artifact write was aborted');
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
