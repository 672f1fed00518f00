import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Keys } from '../keys.ts';

import { ROLES, SCOPE_ROLES, type Role, type ScopeRole } from '../contract/admin.ts';

export { ROLES, SCOPE_ROLES, type Role, type ScopeRole };

/** A key of one scope, with one of the scope's roles. */
export interface ScopeKeyInfo { id: string; scope: string; role: ScopeRole; createdAt: number }
/** An operator key: bound to no scope, it may call the operator routes only. */
export interface OperatorKeyInfo { id: string; scope: null; role: 'operator'; createdAt: number }
export type ApiKeyInfo = ScopeKeyInfo | OperatorKeyInfo;

const sha256 = (s: string) => createHash('sha256').update(s).digest();
const newKey = () => `bk_${randomBytes(32).toString('base64url')}`;

/**
 * API keys belong to one scope and have a role, or are operator keys, bound to no scope.
 * Only the SHA-256 of a key is stored; the key itself (`bk_` + 32 random bytes, base64url)
 * is shown once, when it is created. Lookup is by hash, then the stored hash is compared in
 * constant time.
 */
export class ApiKeyStore {
  constructor(private readonly redis: Redis, private readonly keys: Keys) {}

  async create(scope: string, role: ScopeRole, key = newKey()): Promise<ScopeKeyInfo & { key: string }> {
    const info: ScopeKeyInfo = { id: newId(), scope, role, createdAt: Date.now() };
    await this.store(info, key, this.keys.apiKeysOfScope(scope));
    return { ...info, key };
  }

  /** Makes an operator key: its record has no scope, and it is listed with the other operator keys. */
  async createOperator(key = newKey()): Promise<OperatorKeyInfo & { key: string }> {
    const info: OperatorKeyInfo = { id: newId(), scope: null, role: 'operator', createdAt: Date.now() };
    await this.store(info, key, this.keys.operatorKeyIds);
    return { ...info, key };
  }

  /** The key's record by its hash, its id, and its id in `listedIn` (its scope's set, or the operators'), in one MULTI. */
  private async store(info: ApiKeyInfo, key: string, listedIn: string): Promise<void> {
    const hash = sha256(key).toString('hex');
    const record: Record<string, string | number> = { id: info.id, role: info.role, createdAt: info.createdAt, hash };
    if (info.scope !== null) record.scope = info.scope;
    await this.redis
      .multi()
      .hset(this.keys.apiKeyByHash(hash), record)
      .set(this.keys.apiKeyId(info.id), hash)
      .sadd(listedIn, info.id)
      .sadd(this.keys.apiKeyIds, info.id)
      .exec();
  }

  /** Whether any key exists, in any scope (`baton start` makes a dev key only when none does). */
  async any(): Promise<boolean> {
    return (await this.redis.scard(this.keys.apiKeyIds)) > 0;
  }

  /** Declares a key given in configuration (idempotent: the same key keeps its record). */
  async ensure(scope: string, role: ScopeRole, key: string): Promise<ApiKeyInfo> {
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
    return keyInfo(h);
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

  /** The keys of a scope, oldest first. */
  async list(scope: string): Promise<ScopeKeyInfo[]> {
    return (await this.listed(this.keys.apiKeysOfScope(scope))).filter((k): k is ScopeKeyInfo => k.scope === scope);
  }

  /** The operator keys, oldest first. */
  async listOperators(): Promise<OperatorKeyInfo[]> {
    return (await this.listed(this.keys.operatorKeyIds)).filter((k): k is OperatorKeyInfo => k.role === 'operator');
  }

  private async listed(set: string): Promise<ApiKeyInfo[]> {
    const ids = await this.redis.smembers(set);
    const out: ApiKeyInfo[] = [];
    for (const id of ids) {
      const hash = await this.redis.get(this.keys.apiKeyId(id));
      if (!hash) continue;
      const info = keyInfo(await this.redis.hgetall(this.keys.apiKeyByHash(hash)));
      if (info) out.push(info);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt);
  }

  /** Returns false when no such key exists. */
  async revoke(id: string): Promise<boolean> {
    const hash = await this.redis.get(this.keys.apiKeyId(id));
    if (!hash) return false;
    const [scope, role] = await this.redis.hmget(this.keys.apiKeyByHash(hash), 'scope', 'role');
    const m = this.redis.multi().del(this.keys.apiKeyByHash(hash)).del(this.keys.apiKeyId(id)).srem(this.keys.apiKeyIds, id);
    if (scope) m.srem(this.keys.apiKeysOfScope(scope), id);
    if (role === 'operator') m.srem(this.keys.operatorKeyIds, id);
    await m.exec();
    return true;
  }
}

const newId = () => `k${randomBytes(6).toString('hex')}`;

/**
 * A stored key record as a key: an operator's has no scope, a scope key's has its scope and
 * one of the scope's roles. A record that is neither (written by hand) is no key at all.
 */
function keyInfo(h: Record<string, string>): ApiKeyInfo | undefined {
  const base = { id: h.id, createdAt: Number(h.createdAt) };
  if (!h.id) return undefined;
  if (h.role === 'operator') return h.scope === undefined ? { ...base, scope: null, role: 'operator' } : undefined;
  if (!SCOPE_ROLES.includes(h.role as ScopeRole) || !h.scope) return undefined;
  return { ...base, scope: h.scope, role: h.role as ScopeRole };
}
