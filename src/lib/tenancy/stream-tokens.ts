import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { isValidId } from '../contract/ids.ts';
import { BatonError } from '../errors.ts';
import type { Keys } from '../keys.ts';
import { redisNowMs } from '../redis/redis.ts';
import type { ApiKeyStore } from './api-keys.ts';

/** What a stream token opens: the events of one run, or of every run of one session. */
export type StreamGrant = { runId: string } | { sessionId: string };

export interface MintedStreamToken {
  token: string;
  /** Redis time (ms) after which the token opens nothing. */
  expiresAt: number;
}

/** `bst_` + 32 random bytes (base64url): unguessable, and never taken for an API key (`bk_…`). */
const TOKEN_PATTERN = /^bst_[A-Za-z0-9_-]{43}$/;

/** The one action these tokens allow; a capability record made for any other action opens no stream. */
const ACTION = 'stream';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * Read-only tokens a browser page uses instead of an API key (invariant 14): each opens the
 * events of one run or one session of one scope, for STREAM_TOKEN_TTL_MS, and nothing else.
 *
 * Stored, not signed: Redis keeps only the token's SHA-256 under the scope's hash tag, with
 * the grant and the id of the key that minted it, and expires the record with the token. So
 * every API process (and one started after a restart) accepts a token any other minted,
 * there is no signing secret to distribute or rotate, a copy of Redis yields no usable token
 * (as with API keys), and a token whose key is revoked is refused at its next connection.
 */
export class StreamTokenStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly apiKeys: ApiKeyStore,
    private readonly ttlMs: number,
    /** STREAM_TOKEN_MINT_PER_MIN: tokens a scope may mint a minute (0: no limit). */
    private readonly mintPerMin = 0,
  ) {}

  /**
   * A new token for `grant`, minted by the key `keyId` of `scope`. A run must exist
   * (RUN_NOT_FOUND otherwise); a session need not, so a page can hold its token before the
   * session's first run is submitted. `limited` (the default): the mint counts against the
   * scope's mints of this minute, and past STREAM_TOKEN_MINT_PER_MIN is refused (429
   * STREAM_TOKEN_RATE_LIMITED). A submit's token is not: the submit rate bounds those.
   */
  async mint(scope: string, grant: StreamGrant, keyId: string, o: { limited?: boolean } = {}): Promise<MintedStreamToken> {
    const sk = this.keys.scope(scope);
    if ('runId' in grant && (await this.redis.exists(sk.run(grant.runId))) === 0) throw new BatonError('RUN_NOT_FOUND');
    // Redis's clock, like every deadline Baton keeps: the record expires exactly at expiresAt.
    const now = await redisNowMs(this.redis);
    if (o.limited !== false && this.mintPerMin > 0) await this.countMint(scope, now);
    const token = `bst_${randomBytes(32).toString('base64url')}`;
    const expiresAt = now + this.ttlMs;
    const record = 'runId' in grant ? { kind: 'run', id: grant.runId } : { kind: 'session', id: grant.sessionId };
    const key = sk.capability(sha256(token));
    const replies = await this.redis.multi().hset(key, { ...record, action: ACTION, keyId }).pexpireat(key, expiresAt).exec();
    for (const [err] of replies ?? []) if (err) throw err;
    return { token, expiresAt };
  }

  /**
   * One more mint of `scope` in the minute of `now` (Redis time): a counter per scope and
   * minute, kept two minutes. Past the limit the count is taken back, so a refusal leaves the
   * counter as it found it, and refused with the rest of the minute as Retry-After. A fixed
   * window: a scope may mint up to twice the limit across the turn of a minute, never more.
   */
  private async countMint(scope: string, now: number): Promise<void> {
    const minute = Math.floor(now / 60_000);
    const key = this.keys.scope(scope).streamTokenMints(minute);
    const replies = await this.redis.multi().incr(key).pexpire(key, 120_000).exec();
    for (const [err] of replies ?? []) if (err) throw err;
    const count = Number(replies?.[0]?.[1]);
    if (count <= this.mintPerMin) return;
    await this.redis.decr(key);
    const retryAfterMs = (minute + 1) * 60_000 - now;
    throw new BatonError('STREAM_TOKEN_RATE_LIMITED', undefined, [
      { path: 'scope', message: `${this.mintPerMin} stream tokens minted this minute (STREAM_TOKEN_MINT_PER_MIN); retry in ${retryAfterMs} ms` },
    ], { retryAfterMs });
  }

  /**
   * Whether `token` opens the events of run `runId` of `scope`: a token of this scope for
   * this run, or for the session the run belongs to, not expired, whose key is still issued.
   * Every other case is the same `false`, so a refusal tells nothing about what exists.
   */
  async opensRun(scope: string, runId: string, token: string): Promise<boolean> {
    return (await this.openerOf(scope, runId, token)) !== undefined;
  }

  /**
   * opensRun, answering with the id of the key that minted the token (undefined: it opens
   * nothing), so an open stream can be counted and ended with that key's.
   */
  async openerOf(scope: string, runId: string, token: string): Promise<string | undefined> {
    if (!TOKEN_PATTERN.test(token) || !isValidId(scope) || !isValidId(runId)) return undefined;
    const sk = this.keys.scope(scope);
    // One round trip: the record and the run share the scope's slot.
    const replies = (await this.redis.pipeline().hgetall(sk.capability(sha256(token))).hget(sk.run(runId), 'sessionId').exec()) ?? [];
    for (const [err] of replies) if (err) throw err;
    const grant = replies[0]?.[1] as Record<string, string> | undefined;
    const sessionId = replies[1]?.[1] as string | null | undefined;
    if (!grant?.keyId || grant.action !== ACTION) return undefined;
    const matches = grant.kind === 'run' ? grant.id === runId : grant.kind === 'session' && grant.id === sessionId;
    return matches && (await this.apiKeys.isIssued(grant.keyId)) ? grant.keyId : undefined;
  }

  /** openerOf for a session's own routes (a chat's): a token of this scope minted for session `sessionId`. */
  async sessionOpenerOf(scope: string, sessionId: string, token: string): Promise<string | undefined> {
    if (!TOKEN_PATTERN.test(token) || !isValidId(scope) || !isValidId(sessionId)) return undefined;
    const grant = await this.redis.hgetall(this.keys.scope(scope).capability(sha256(token)));
    if (!grant.keyId || grant.action !== ACTION || grant.kind !== 'session' || grant.id !== sessionId) return undefined;
    return (await this.apiKeys.isIssued(grant.keyId)) ? grant.keyId : undefined;
  }
}
