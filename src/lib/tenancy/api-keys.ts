import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';

import { ROLES, type Role } from '../contract/admin.ts';

export { ROLES, type Role };

export interface ApiKeyInfo { id: string; scope: string; role: Role; createdAt: number }

const sha256 = (s: string) => createHash('sha256').update(s).digest();

/**
 * API keys belong to one scope and have a role. Only the SHA-256 of a key is stored; the
 * key itself (`bk_` + 32 random bytes, base64url) is shown once, when it is created.
 * Lookup is by hash, then the stored hash is compared in constant time.
 */
export class ApiKeyStore {
  constructor(private readonly redis: Redis, private readonly keys: Keys) {}

  async create(scope: string, role: Role, key = `bk_${randomBytes(32).toString('base64url')}`): Promise<ApiKeyInfo & { key: string }> {
    const id = `k${randomBytes(6).toString('hex')}`;
    const hash = sha256(key).toString('hex');
    const info: ApiKeyInfo = { id, scope, role, createdAt: Date.now() };
    await this.redis
      .multi()
      .hset(this.keys.apiKeyByHash(hash), { ...info, hash })
      .set(this.keys.apiKeyId(id), hash)
      .sadd(this.keys.apiKeysOfScope(scope), id)
      .sadd(this.keys.apiKeyIds, id)
      .exec();
    return { ...info, key };
  }

  /** Whether any key exists, in any scope (`baton start` makes a dev key only when none does). */
  async any(): Promise<boolean> {
    return (await this.redis.scard(this.keys.apiKeyIds)) > 0;
  }

  /** Declares a key given in configuration (idempotent: the same key keeps its record). */
  async ensure(scope: string, role: Role, key: string): Promise<ApiKeyInfo> {
    const existing = await this.verify(key);
    if (existing && existing.scope === scope && existing.role === role) return existing;
    if (existing) await this.revoke(existing.id);
    return this.create(scope, role, key);
  }

  async verify(key: string): Promise<ApiKeyInfo | undefined> {
    const presented = sha256(key);
    const h = await this.redis.hgetall(this.keys.apiKeyByHash(presented.toString('hex')));
    if (!h.hash) return undefined;
    const stored = Buffer.from(h.hash, 'hex');
    if (stored.length !== presented.length || !timingSafeEqual(stored, presented)) return undefined;
    return { id: h.id, scope: h.scope, role: h.role as Role, createdAt: Number(h.createdAt) };
  }

  /** Which of these key ids still exist (revoke deletes a key's id record). */
  async existing(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const pipe = this.redis.pipeline();
    for (const id of ids) pipe.exists(this.keys.apiKeyId(id));
    const replies = (await pipe.exec()) ?? [];
    const out = new Set<string>();
    replies.forEach(([err, n], i) => {
      if (err) throw err;
      if (n === 1) out.add(ids[i]);
    });
    return out;
  }

  /** Whether the key with this id is still issued (not revoked). */
  async isIssued(id: string): Promise<boolean> {
    return (await this.redis.exists(this.keys.apiKeyId(id))) === 1;
  }

  async list(scope: string): Promise<ApiKeyInfo[]> {
    const ids = await this.redis.smembers(this.keys.apiKeysOfScope(scope));
    const out: ApiKeyInfo[] = [];
    for (const id of ids) {
      const hash = await this.redis.get(this.keys.apiKeyId(id));
      if (!hash) continue;
      const h = await this.redis.hgetall(this.keys.apiKeyByHash(hash));
      if (h.id) out.push({ id: h.id, scope: h.scope, role: h.role as Role, createdAt: Number(h.createdAt) });
    }
    return out.sort((a, b) => a.createdAt - b.createdAt);
  }

  /** Returns false when no such key exists. */
  async revoke(id: string): Promise<boolean> {
    const hash = await this.redis.get(this.keys.apiKeyId(id));
    if (!hash) return false;
    const scope = await this.redis.hget(this.keys.apiKeyByHash(hash), 'scope');
    const m = this.redis.multi().del(this.keys.apiKeyByHash(hash)).del(this.keys.apiKeyId(id)).srem(this.keys.apiKeyIds, id);
    if (scope) m.srem(this.keys.apiKeysOfScope(scope), id);
    await m.exec();
    return true;
  }
}
